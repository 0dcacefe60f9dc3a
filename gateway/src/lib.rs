//! The gateway of the agent session server.
