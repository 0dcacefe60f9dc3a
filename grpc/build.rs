//! Compiles `proto/` into the gRPC bindings of the `SessionExecutor` service: client stubs with
//! the `client` feature, server stubs with `server`.
//!
//! `protoc` comes from the `protoc-bin-vendored` crate so that a fresh machine needs no system
//! protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // tonic-prost-build (through prost-build) looks the compiler up in PROTOC.
    unsafe_set_protoc(&protoc);
    println!("cargo:rerun-if-changed=../proto");
    let descriptors =
        std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("agent_runtime_descriptor.bin");
    tonic_prost_build::configure()
        .build_client(std::env::var_os("CARGO_FEATURE_CLIENT").is_some())
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .file_descriptor_set_path(descriptors)
        .compile_protos(&["../proto/agent_runtime/v1/executor.proto"], &["../proto"])?;
    Ok(())
}

#[allow(unsafe_code)]
fn unsafe_set_protoc(path: &std::path::Path) {
    // `set_var` is unsafe in edition 2024 because other threads may read the environment; a build
    // script has no other threads at this point.
    unsafe { std::env::set_var("PROTOC", path) };
}
