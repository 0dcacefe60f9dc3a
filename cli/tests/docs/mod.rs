//! The README and the configuration reference are true of this build.

mod configuration_reference;
mod kubernetes;
mod readme_example;
