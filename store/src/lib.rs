//! Storage ports of the agent session server and their memory and JSONL backends.
