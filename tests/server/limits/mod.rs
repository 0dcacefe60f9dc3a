//! The protective limits of the HTTP surface.

mod catalogue;
mod http;
