//! The protective limits of the HTTP surface.

mod catalogue;
mod http;
mod pending_inputs;
