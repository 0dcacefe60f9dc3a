//! The built-in tools.

mod catalogue;
mod exec;
mod fs;
mod memory;
mod orphans;
mod reference;
mod refusals;
mod reliability;
mod shells;
mod url_rules;
mod web_fetch;
mod web_fetch_options;
mod web_search;
