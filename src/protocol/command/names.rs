//! Command names, and what each needs (docs/protocol.md §2.1), from the command table.

use serde::{Deserialize, Serialize};

use crate::protocol::scope::Scope;

macro_rules! declare_names {
    (
        commands { $(
            $variant:ident $handler:ident $wire:literal ($data:ty => $success:ty)
            [$($scope:ident),*] $read_only:literal, $names:ident;
        )* }
        executor { $($executor:tt)* }
    ) => {
        /// A command's name: its wire `type`, without its data.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum CommandName {
            $( #[serde(rename = $wire)] $variant, )*
        }

        /// The command types in the order of docs/protocol.md §2 (what `initialize` lists).
        pub const COMMAND_TYPES: [&str; [$($wire),*].len()] = [$($wire),*];

        impl CommandName {
            /// Every command, in the order of [`COMMAND_TYPES`].
            pub const ALL: [CommandName; COMMAND_TYPES.len()] = [$(CommandName::$variant),*];

            /// The wire `type` string.
            pub fn as_str(self) -> &'static str {
                match self { $( CommandName::$variant => $wire, )* }
            }

            /// The command of a wire `type` string, if there is one.
            pub fn parse(wire: &str) -> Option<CommandName> {
                match wire {
                    $( $wire => Some(CommandName::$variant), )*
                    _ => None,
                }
            }

            /// A command that changes nothing: safe to run again, so its result is never
            /// stored under its command id.
            pub fn is_read_only(self) -> bool {
                match self { $( CommandName::$variant => $read_only, )* }
            }

            /// Every scope the command needs; `session:admin` satisfies all.
            pub fn required_scopes(self) -> &'static [Scope] {
                match self { $( CommandName::$variant => &[$(Scope::$scope),*], )* }
            }
        }
    };
}

command_table!(declare_names);

impl std::fmt::Display for CommandName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}
