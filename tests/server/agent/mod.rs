//! The agent loop: spend caps, the session state model, profiles.

mod profiles;
mod spend_caps;
mod state_model;
