//! The gRPC boundary between gateways and executors: the `SessionExecutor` service generated
//! from `proto/` by `build.rs` (client stubs with the `client` feature, server stubs with
//! `server`), and the one conversion each way between its messages and the protocol types
//! ([`convert`]). Crates that never speak gRPC (the protocol types, the store, the client SDK)
//! do not depend on it.

pub mod convert;
pub mod trace;

#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod generated {
    tonic::include_proto!("agent_runtime.v1");
}

pub use generated::*;

/// Largest gRPC message either side of `SessionExecutor` sends or accepts (RES-06). A
/// `session.read` answer carries the whole transcript, so tonic's 4 MiB default would refuse
/// long sessions; 64 MiB matches the largest record the JSONL store takes. A larger message
/// fails its call with `RESOURCE_EXHAUSTED` (or `OUT_OF_RANGE` on the sender) and nothing else.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Metadata key of a failed call the executor never ran (it refused it before looking at
/// it: draining): the gateway may send the command to another executor. A status without it
/// proves nothing, whatever its message says.
pub const NOT_RUN_METADATA: &str = "agent-runtime-not-run";

/// A failure that proves the command was not run, marked so.
pub fn not_run(status: tonic::Status) -> tonic::Status {
    let mut status = status;
    status.metadata_mut().insert(
        NOT_RUN_METADATA,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    status
}

/// Whether `status` carries the [`NOT_RUN_METADATA`] marker.
pub fn is_marked_not_run(status: &tonic::Status) -> bool {
    status.metadata().get(NOT_RUN_METADATA).is_some()
}

/// The encoded descriptors of `proto/`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/agent_runtime_descriptor.bin"));
