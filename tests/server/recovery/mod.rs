//! `session.read` recovery, restarts and shutdown.

mod read;
mod restart;
mod shutdown;
