//! What operators deploy next to the server (deploy/), checked with the tools they run it with.

mod prometheus;
