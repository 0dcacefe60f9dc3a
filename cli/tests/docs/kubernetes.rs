//! The Kubernetes manifests of `deploy/kubernetes/`, the base and its `try-it` overlay, checked
//! without a cluster (none runs in CI):
//!
//! * every manifest, and the overlay as kustomize renders it, is valid against the API schemas
//!   of each release in [`KUBERNETES_VERSIONS`], offline (`tests/kubernetes/validate.py`, on
//!   `kubernetes-validate`, which bundles the schemas);
//! * the TOML each workload mounts loads with the server's real, strict loader, and the workloads
//!   fit it: probes on the routes and ports it serves, grace periods covering its shutdown
//!   sequence, secrets referenced and templated, requests and limits, disruption budgets;
//! * the overlay is the documented demo token and the demo model, and the README walks through
//!   both.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_runtime_cli::config::ServeConfig;
use agent_runtime_executor::provider::ProviderKind;
use agent_runtime_gateway::AuthMode;
use agent_runtime_gateway::auth::token_sha256;
use serde_json::Value;

use super::configuration_reference::{load_ok, needs_authentication, read, root};

/// The Kubernetes releases whose API schemas every manifest is validated against: the oldest the
/// manifests are written for (the disruption budgets' `unhealthyPodEvictionPolicy` is GA from
/// 1.31) and the newest that the validator `scripts/test.sh` installs bundles.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.31", "1.37"];

/// What `scripts/test.sh` installs; pinned, since a newer release drops the oldest schemas.
const VALIDATOR: &str = "kubernetes-validate==1.37.0";

/// The try-it overlay's bearer token, published on purpose (README.md, "Kubernetes").
const TRY_IT_TOKEN: &str = "try-it-demo-token";

const BASE: &str = "deploy/kubernetes";
const TRY_IT: &str = "deploy/kubernetes/try-it";

/// Every document of a YAML file (relative to the repository root, or absolute), as JSON
/// (PyYAML's safe loader; `scripts/test.sh` installs it).
fn yaml_documents(path: impl AsRef<Path>) -> Vec<Value> {
    let path = root().join(path);
    let output = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
        ])
        .arg(&path)
        .output()
        .expect("python3 with PyYAML is installed by scripts/test.sh");
    assert!(
        output.status.success(),
        "{} is not valid YAML: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn kinds(documents: &[Value]) -> Vec<&str> {
    documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect()
}

fn keys(object: &Value) -> BTreeSet<&str> {
    object
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// The base as `kubectl apply -k deploy/kubernetes` applies it: the listed files, with the
/// kustomization's namespace on every namespaced resource.
fn base() -> Vec<Value> {
    let kustomization = &yaml_documents(format!("{BASE}/kustomization.yaml"))[0];
    let namespace = kustomization["namespace"].as_str().expect("a namespace");
    let mut documents = Vec::new();
    for file in kustomization["resources"].as_array().unwrap() {
        documents.extend(yaml_documents(format!("{BASE}/{}", file.as_str().unwrap())));
    }
    for document in &mut documents {
        if document["kind"] != "Namespace" {
            document["metadata"]["namespace"] = namespace.into();
        }
    }
    documents
}

/// The files the try-it overlay patches the base with.
fn try_it_patches() -> Vec<String> {
    let overlay = &yaml_documents(format!("{TRY_IT}/kustomization.yaml"))[0];
    // Anything else (images, replicas, a namespace, more resources) would go unrendered below.
    assert_eq!(
        keys(overlay),
        BTreeSet::from(["apiVersion", "kind", "resources", "patches"]),
        "{TRY_IT}/kustomization.yaml"
    );
    assert_eq!(overlay["resources"], serde_json::json!([".."]));
    overlay["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|patch| {
            assert_eq!(keys(patch), BTreeSet::from(["path"]), "a patch is a file");
            format!("{TRY_IT}/{}", patch["path"].as_str().unwrap())
        })
        .collect()
}

/// The overlay as `kubectl apply -k deploy/kubernetes/try-it` applies it. Its patches are
/// strategic merges of ConfigMaps, which kustomize merges `data` key by key; a patch of another
/// kind would need the merge keys of lists, which this rendering does not do, so it is refused.
fn try_it(base: &[Value]) -> Vec<Value> {
    let mut documents = base.to_vec();
    for path in try_it_patches() {
        for patch in yaml_documents(&path) {
            assert_eq!(
                patch["kind"], "ConfigMap",
                "{path}: only ConfigMaps are patched"
            );
            assert_eq!(
                keys(&patch),
                BTreeSet::from(["apiVersion", "kind", "metadata", "data"]),
                "{path}"
            );
            assert_eq!(
                keys(&patch["metadata"]),
                BTreeSet::from(["name", "namespace"]),
                "{path}"
            );
            let target = documents
                .iter_mut()
                .find(|d| {
                    d["kind"] == patch["kind"]
                        && d["apiVersion"] == patch["apiVersion"]
                        && d["metadata"]["name"] == patch["metadata"]["name"]
                        && d["metadata"]["namespace"] == patch["metadata"]["namespace"]
                })
                .unwrap_or_else(|| panic!("{path}: the base has no such ConfigMap"));
            for (key, value) in patch["data"].as_object().unwrap() {
                target["data"][key] = value.clone();
            }
        }
    }
    documents
}

fn only<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    let mut found = documents.iter().filter(|d| d["kind"] == kind);
    let first = found.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(found.next().is_none(), "more than one {kind}");
    first
}

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

/// The TOML a workload reads: the ConfigMap item mounted where its `--config=` points.
fn mounted_config<'a>(workload: &Value, configmap: &'a Value) -> &'a str {
    let container = container(workload);
    let config_arg = argument(container, "--config=");
    let (dir, file) = config_arg.rsplit_once('/').unwrap();
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == dir)
        .unwrap_or_else(|| panic!("nothing is mounted at {dir}"));
    let volume = workload["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
    let item = volume["configMap"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["path"] == file)
        .unwrap_or_else(|| panic!("no ConfigMap item is mounted as {file}"));
    configmap["data"][item["key"].as_str().unwrap()]
        .as_str()
        .unwrap()
}

/// The value of a container's `PREFIX...` argument.
fn argument<'a>(container: &'a Value, prefix: &str) -> &'a str {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find_map(|arg| arg.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("a {prefix} argument"))
}

/// The port of a `HOST:PORT` argument.
fn listen_port(container: &Value) -> u64 {
    let listen = argument(container, "--listen=");
    listen.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// A probe's port as a number: a named port is looked up among the container's ports.
fn probe_port(container: &Value, port: &Value) -> u64 {
    if let Some(number) = port.as_u64() {
        return number;
    }
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == *port)
        .unwrap_or_else(|| panic!("the container has no port named {port}"))["containerPort"]
        .as_u64()
        .unwrap()
}

fn grace_ms(workload: &Value) -> u128 {
    u128::from(
        workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds"),
    ) * 1000
}

/// Checks that the workloads of a rendering fit the configuration they mount; returns the
/// gateway's and the executor's configuration.
fn check_workloads(documents: &[Value], what: &str) -> (ServeConfig, ServeConfig) {
    let configmap = only(documents, "ConfigMap");
    let gateway = only(documents, "Deployment");
    let executor = only(documents, "StatefulSet");
    let migrate = only(documents, "Job");

    // The embedded configuration loads, and the grace periods cover the shutdown sequence.
    let gateway_config = load_ok(
        mounted_config(gateway, configmap),
        &format!("{what}: gateway.toml"),
    );
    needs_authentication(&gateway_config, &format!("{what}: gateway.toml"));
    let g = &gateway_config.gateway;
    assert!(
        grace_ms(gateway) > (g.shutdown_readiness_delay + g.shutdown_grace).as_millis(),
        "{what}: the gateway's terminationGracePeriodSeconds covers readiness delay + grace"
    );
    let executor_config = load_ok(
        mounted_config(executor, configmap),
        &format!("{what}: executor.toml"),
    );
    assert!(grace_ms(executor) > executor_config.executor.shutdown_grace.as_millis());

    // Gateways: readyz and healthz under the configured base path, on the port --listen binds.
    let gateway_container = container(gateway);
    for (probe, route) in [("readinessProbe", "readyz"), ("livenessProbe", "healthz")] {
        let http = &gateway_container[probe]["httpGet"];
        assert_eq!(
            http["path"],
            format!("{}/{route}", g.base_path),
            "{what}: the gateway's {probe}"
        );
        assert_eq!(
            probe_port(gateway_container, &http["port"]),
            listen_port(gateway_container),
            "{what}: the gateway's {probe} port"
        );
    }
    // Executors: ready while gRPC health (on the --listen port) says SERVING, which stops when
    // a drain begins; alive while the metrics listener answers, which it does until exit.
    let executor_container = container(executor);
    assert_eq!(
        executor_container["readinessProbe"]["grpc"]["port"].as_u64(),
        Some(listen_port(executor_container)),
        "{what}: the executor's readiness probe asks gRPC health on its listener"
    );
    let liveness = &executor_container["livenessProbe"]["httpGet"];
    assert_eq!(liveness["path"], "/metrics", "{what}: the only route there");
    let metrics = executor_config
        .telemetry
        .metrics_listen
        .expect("executor.toml sets [telemetry] metrics_listen");
    assert_eq!(
        probe_port(executor_container, &liveness["port"]),
        u64::from(metrics.port()),
        "{what}: the executor's liveness probe asks its metrics listener"
    );

    // Every container of every workload has CPU and memory requests and limits.
    for workload in [gateway, executor, migrate] {
        let name = workload["metadata"]["name"].as_str().unwrap();
        for container in workload["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            for bound in ["requests", "limits"] {
                for resource in ["cpu", "memory"] {
                    assert!(
                        container["resources"][bound][resource].is_string(),
                        "{what}: {name} has no {resource} {bound}"
                    );
                }
            }
        }
    }

    // One disruption budget per role, letting a drain take one pod while another serves.
    for workload in [gateway, executor] {
        let name = workload["metadata"]["name"].as_str().unwrap();
        let selector = &workload["spec"]["selector"]["matchLabels"];
        let budgets: Vec<_> = documents
            .iter()
            .filter(|d| {
                d["kind"] == "PodDisruptionBudget"
                    && d["spec"]["selector"]["matchLabels"] == *selector
            })
            .collect();
        assert_eq!(
            budgets.len(),
            1,
            "{what}: one PodDisruptionBudget for {name}"
        );
        let max_unavailable = budgets[0]["spec"]["maxUnavailable"]
            .as_u64()
            .expect("maxUnavailable as a count");
        let replicas = workload["spec"]["replicas"].as_u64().unwrap();
        assert!(
            0 < max_unavailable && max_unavailable < replicas,
            "{what}: {name}'s budget lets a drain proceed and keeps a pod serving"
        );
    }

    // The executors' headless Service gives every pod the DNS name it advertises.
    let headless = documents
        .iter()
        .find(|s| {
            s["kind"] == "Service" && s["metadata"]["name"] == executor["spec"]["serviceName"]
        })
        .expect("the StatefulSet's Service");
    assert_eq!(headless["spec"]["clusterIP"], "None");

    // Secrets are referenced, never inlined, and the template defines every referenced key.
    let template = yaml_documents(format!("{BASE}/secret.example.yaml"));
    for workload in [gateway, executor, migrate] {
        let container = container(workload);
        for variable in container["env"].as_array().unwrap() {
            let name = variable["name"].as_str().unwrap();
            if name.starts_with("AGENT_RUNTIME_") || name.ends_with("_KEY") {
                let reference = &variable["valueFrom"]["secretKeyRef"];
                assert!(reference.is_object(), "{name} comes from a Secret");
                let secret = template
                    .iter()
                    .find(|s| s["metadata"]["name"] == reference["name"])
                    .unwrap_or_else(|| panic!("no Secret {} in the template", reference["name"]));
                assert!(secret["stringData"][reference["key"].as_str().unwrap()].is_string());
            }
        }
    }
    (gateway_config, executor_config)
}

#[test]
fn the_kubernetes_manifests_are_valid_and_fit_the_configuration_they_embed() {
    let base = base();
    for document in &base {
        assert!(document["apiVersion"].is_string() && document["metadata"]["name"].is_string());
    }
    assert_eq!(
        kinds(&base),
        [
            "Namespace",
            "ConfigMap",
            "Job",
            "Service",
            "StatefulSet",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "PodDisruptionBudget"
        ]
    );
    let (gateway, _) = check_workloads(&base, BASE);
    assert!(
        matches!(gateway.auth_mode, AuthMode::Jwt(_)),
        "the base authenticates JWTs"
    );
}

#[test]
fn the_kubernetes_try_it_overlay_is_the_published_demo_token_and_the_demo_model() {
    let overlay = read(&format!("{TRY_IT}/kustomization.yaml"));
    assert!(overlay.starts_with("# NOT FOR PRODUCTION."), "{overlay}");
    let (gateway, executor) = check_workloads(&try_it(&base()), TRY_IT);
    assert_eq!(gateway.auth_mode, AuthMode::Static);
    let hashes: Vec<_> = gateway.tokens.iter().map(|t| &t.token_sha256).collect();
    assert_eq!(
        hashes,
        [&token_sha256(TRY_IT_TOKEN)],
        "only the published token"
    );
    assert_eq!(executor.provider.kind, ProviderKind::Demo);
}

/// The YAML files of `deploy/kubernetes/` that describe API objects (all but kustomizations).
fn manifest_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
                && path.file_name().unwrap() != "kustomization.yaml"
            {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&root().join(BASE), &mut found);
    found.sort();
    found
}

#[test]
fn the_kubernetes_manifests_validate_against_the_kubernetes_api_schemas() {
    let installed = Command::new("python3")
        .args(["-c", "import kubernetes_validate"])
        .output()
        .expect("python3 runs");
    assert!(
        installed.status.success(),
        "the Kubernetes schema validator is missing: scripts/test.sh installs it \
         (python3 -m pip install {VALIDATOR}):\n{}",
        String::from_utf8_lossy(&installed.stderr)
    );

    let mut files = manifest_files();
    for listed in [
        format!("{BASE}/secret.example.yaml"),
        format!("{BASE}/pod-disruption-budgets.yaml"),
    ]
    .into_iter()
    .chain(try_it_patches())
    {
        assert!(
            files.contains(&root().join(&listed)),
            "{listed} is validated"
        );
    }
    // The overlay as applied, its patches merged into the base.
    let dir = tempfile::tempdir().unwrap();
    let rendered = dir.path().join("try-it-rendered.yaml");
    let documents: Vec<String> = try_it(&base()).iter().map(Value::to_string).collect();
    std::fs::write(&rendered, documents.join("\n---\n")).unwrap();
    files.push(rendered);
    let expected: usize = files.iter().map(|f| yaml_documents(f).len()).sum();

    for version in KUBERNETES_VERSIONS {
        let output = Command::new("python3")
            .arg(root().join("tests/kubernetes/validate.py"))
            .arg(version)
            .args(&files)
            .output()
            .expect("python3 runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "the manifests are not valid Kubernetes {version} objects:\n{}{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        let validated = stdout.lines().filter(|l| l.starts_with("ok ")).count();
        assert_eq!(
            validated, expected,
            "every document is validated against {version}:\n{stdout}"
        );
    }
}

#[test]
fn the_readme_walks_through_the_kubernetes_manifests() {
    let readme = read("README.md");
    let start = readme
        .find("\n## Kubernetes\n")
        .expect("README.md has a Kubernetes section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 1)];
    let mut expected = vec![
        "kubectl apply -k deploy/kubernetes\n".to_owned(),
        "kubectl apply -k deploy/kubernetes/try-it\n".to_owned(),
        "secret.example.yaml".to_owned(),
        "job/agent-runtime-migrate".to_owned(),
        "\"type\":\"session.create\"".to_owned(),
        TRY_IT_TOKEN.to_owned(),
        "not for production".to_owned(),
        "No Kubernetes cluster runs in CI".to_owned(),
    ];
    expected.extend(
        KUBERNETES_VERSIONS
            .iter()
            .map(|version| format!("Kubernetes {version}")),
    );
    for needle in expected {
        assert!(
            section.contains(&needle),
            "{needle:?} is not in:\n{section}"
        );
    }
}
