//! The command API: lifecycle, message schema, user content.

mod api;
mod content;
mod message_schema;
