//! The generator of [`super`]: from the command table, the typed command, its success data, the
//! gateway's handler and the executor port.

/// `Some(session id)` for a command whose data names a session.
macro_rules! session_of {
    (session, $data:expr) => {
        Some($data.session_id.as_str())
    };
    (none, $data:expr) => {{
        let _ = $data;
        None
    }};
}

/// Where an executor command runs.
macro_rules! placement_of {
    (New, $data:expr) => {{
        let _ = $data;
        Placement::New
    }};
    (Loads, $data:expr) => {
        Placement::Session($data.session_id.as_str())
    };
    (Session, $data:expr) => {
        Placement::Session($data.session_id.as_str())
    };
}

/// Whether a draining executor still runs the command: only one that starts or loads no
/// session.
macro_rules! runs_while_draining {
    (New) => {
        false
    };
    (Loads) => {
        false
    };
    (Session) => {
        true
    };
}

macro_rules! declare_commands {
    (
        commands { $(
            $variant:ident $handler:ident $wire:literal ($data:ty => $success:ty)
            [$($scope:ident),*] $read_only:literal, $names:ident;
        )* }
        executor { $(
            $executor:ident $method:ident($executor_data:ty) -> $output:ty, $placement:ident;
        )* }
    ) => {
        /// The typed `{type, data}` of a command.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(tag = "type", content = "data", deny_unknown_fields)]
        pub enum CommandKind {
            $( #[serde(rename = $wire)] $variant($data), )*
        }

        impl CommandKind {
            pub fn name(&self) -> CommandName {
                match self { $( CommandKind::$variant(_) => CommandName::$variant, )* }
            }

            /// The session the command targets (the *source* session of a fork); `None` for
            /// initialize, create and list.
            pub fn session_id(&self) -> Option<&str> {
                match self { $( CommandKind::$variant(data) => session_of!($names, data), )* }
            }
        }

        /// The typed success `data` of a command.
        #[derive(Clone, Debug, PartialEq)]
        pub enum SuccessData {
            $( $variant($success), )*
        }

        impl SuccessData {
            /// The `data` object this value is sent as.
            pub fn to_data(&self) -> JsonObject {
                match self { $( SuccessData::$variant(data) => data.to_data(), )* }
            }

            pub fn name(&self) -> CommandName {
                match self { $( SuccessData::$variant(_) => CommandName::$variant, )* }
            }
        }

        /// Each command as a type, for typed calls: its data and its success `data` are paired
        /// here once (`AgentClient::command::<calls::CreateSession>(…)`).
        pub mod calls {
            $(
                #[doc = concat!("`", $wire, "`.")]
                #[derive(Clone, Copy, Debug)]
                pub struct $variant;
            )*
        }

        $(
            impl SessionCommand for calls::$variant {
                const NAME: CommandName = CommandName::$variant;
                type Data = $data;
                type Success = $success;

                fn into_kind(data: $data) -> CommandKind {
                    CommandKind::$variant(data)
                }
            }
        )*

        /// Answers every command, one typed method each (the gateway's dispatch): a method that
        /// answers another command's success type does not compile.
        #[async_trait]
        pub trait CommandHandler: Send + Sync {
            $(
                #[doc = concat!("`", $wire, "`.")]
                async fn $handler(
                    &self,
                    context: &CommandContext,
                    data: $data,
                ) -> Result<Reply<$success>, ProtocolError>;
            )*
        }

        /// Runs `command` on `handler`: the one place a command meets its handler method.
        pub async fn handle<H: CommandHandler + ?Sized>(
            handler: &H,
            context: &CommandContext,
            command: CommandKind,
        ) -> Result<Reply<SuccessData>, ProtocolError> {
            Ok(match command {
                $(
                    CommandKind::$variant(data) => {
                        let reply = handler.$handler(context, data).await?;
                        Reply {
                            data: SuccessData::$variant(reply.data),
                            receipt_completed: reply.receipt_completed,
                        }
                    }
                )*
            })
        }

        /// The `data` and success schemas of every command, in table order.
        #[cfg(feature = "schema")]
        pub fn command_schemas(
            generator: &mut schemars::generate::SchemaGenerator,
        ) -> Vec<(&'static str, schemars::Schema, schemars::Schema)> {
            vec![$(
                ($wire, generator.subschema_for::<$data>(), generator.subschema_for::<$success>()),
            )*]
        }

        /// A command an executor runs, with its data.
        #[derive(Clone, Debug, PartialEq)]
        pub enum ExecutorCommand {
            $( $executor($executor_data), )*
        }

        /// What an executor answers to an [`ExecutorCommand`] of the same variant.
        #[derive(Clone, Debug, PartialEq)]
        pub enum ExecutorOutput {
            $( $executor($output), )*
        }

        /// The executor's commands, one typed method each: what the in-process executor
        /// implements, and what the gateway calls on any [`SessionExecutor`].
        #[async_trait]
        pub trait SessionCommands: Send + Sync {
            $(
                async fn $method(
                    &self,
                    context: &CommandContext,
                    data: $executor_data,
                ) -> Result<$output, ProtocolError>;
            )*
        }

        impl ExecutorCommand {
            pub fn name(&self) -> CommandName {
                match self { $( ExecutorCommand::$executor(_) => CommandName::$executor, )* }
            }

            pub fn placement(&self) -> Placement<'_> {
                match self {
                    $( ExecutorCommand::$executor(data) => placement_of!($placement, data), )*
                }
            }

            /// Whether a draining executor still runs it: one that starts or loads no session.
            pub fn runs_while_draining(&self) -> bool {
                match self {
                    $( ExecutorCommand::$executor(_) => runs_while_draining!($placement), )*
                }
            }

            /// The command's `data` as JSON bytes (what travels to a remote executor).
            pub fn data_json(&self) -> Vec<u8> {
                match self { $( ExecutorCommand::$executor(data) => encode(data), )* }
            }

            /// Reads a command that arrived as its `type` and `data` JSON, strictly.
            pub fn from_wire(command_type: &str, data_json: &[u8]) -> Result<Self, WireError> {
                match CommandName::parse(command_type) {
                    $(
                        Some(CommandName::$executor) => {
                            decode(data_json).map(ExecutorCommand::$executor)
                        }
                    )*
                    _ => Err(WireError(format!(
                        "{command_type:?} is not a command an executor runs"
                    ))),
                }
            }

            /// Reads, strictly, the output this command's executor sent as JSON.
            pub fn output_from_json(&self, bytes: &[u8]) -> Result<ExecutorOutput, WireError> {
                match self {
                    $(
                        ExecutorCommand::$executor(_) => {
                            decode(bytes).map(ExecutorOutput::$executor)
                        }
                    )*
                }
            }

            /// Runs the command on `target`'s typed method.
            pub async fn run_on<T: SessionCommands + ?Sized>(
                self,
                target: &T,
                context: &CommandContext,
            ) -> Result<ExecutorOutput, ProtocolError> {
                Ok(match self {
                    $(
                        ExecutorCommand::$executor(data) => {
                            ExecutorOutput::$executor(target.$method(context, data).await?)
                        }
                    )*
                })
            }
        }

        impl ExecutorOutput {
            pub fn name(&self) -> CommandName {
                match self { $( ExecutorOutput::$executor(_) => CommandName::$executor, )* }
            }

            /// The output as JSON bytes (what a remote executor answers).
            pub fn to_json(&self) -> Vec<u8> {
                match self { $( ExecutorOutput::$executor(output) => encode(output), )* }
            }
        }

        /// The port called with typed data: each method sends its command and takes back the
        /// output of the same variant.
        #[async_trait]
        impl SessionCommands for dyn SessionExecutor {
            $(
                async fn $method(
                    &self,
                    context: &CommandContext,
                    data: $executor_data,
                ) -> Result<$output, ProtocolError> {
                    match self.execute(context, ExecutorCommand::$executor(data)).await? {
                        ExecutorOutput::$executor(output) => Ok(output),
                        other => Err(mismatched_output(other.name())),
                    }
                }
            )*
        }
    };
}
