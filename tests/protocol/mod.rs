//! The wire types: fixtures, schema behaviours, fuzzing of the command parser.

mod fixtures;
mod fuzz;
mod items;
mod schema;
