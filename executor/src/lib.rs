//! The executor of the agent session server.
