//! The executor's integration tests: permissions, the sandbox, tools and model providers.

mod support;

mod permissions;
mod providers;
mod sandbox;
mod tools;
