//! The executor's gRPC server: the very same in-process executor behind the `SessionExecutor`
//! service, so the single-process and cluster modes cannot drift.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_runtime::executor_port::{ExecutorCommand, SessionExecutor};
use agent_runtime::secret::Secret;
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_grpc::convert::{context_from_proto, failure_to_proto, reply};
use agent_runtime_grpc::session_executor_server::{self, SessionExecutorServer};
use agent_runtime_grpc::{
    CommandReply, CommandRequest, EventFrame, LoadReply, LoadRequest, LoadedSession,
    MAX_MESSAGE_BYTES, OfferedTool, ReleaseReply, SessionKey, SubscribeRequest, TakeReply,
    TenantRequest, ToolsReply, take_reply,
};
use agent_runtime_store::follow::{FollowOptions, Followed, LiveSignal, TailLog, follow};
use agent_runtime_store::{EventReader, Store, StoreError};
use futures_util::{Stream, StreamExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::auth::check_secret;
use crate::InProcessExecutor;
use crate::leases::WorkerLeases;
use crate::traced::TracedExecutor;

/// Who this executor is, for `Load`.
#[derive(Clone, Debug)]
pub struct WorkerIdentity {
    pub worker_id: String,
    pub capacity: u32,
}

pub struct ExecutorService {
    executor: Arc<InProcessExecutor>,
    /// The same executor with a span per command (the gateway's span is the parent).
    commands: TracedExecutor,
    store: Arc<dyn Store>,
    /// Where `Subscribe` streams read: the events this executor committed, handed over, and the
    /// store for the rest.
    tails: Arc<TailLog>,
    identity: WorkerIdentity,
    leases: Arc<WorkerLeases>,
    draining: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl ExecutorService {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        executor: Arc<InProcessExecutor>,
        telemetry: SharedTelemetry,
        store: Arc<dyn Store>,
        tails: Arc<TailLog>,
        identity: WorkerIdentity,
        leases: Arc<WorkerLeases>,
        draining: Arc<AtomicBool>,
        stop: CancellationToken,
    ) -> Self {
        Self {
            commands: TracedExecutor::new(executor.clone(), telemetry),
            executor,
            store,
            tails,
            identity,
            leases,
            draining,
            stop,
        }
    }

    fn accepting(&self) -> Result<(), Status> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(agent_runtime_grpc::not_run(Status::unavailable(
                "executor is draining",
            )));
        }
        Ok(())
    }
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<EventFrame, Status>> + Send>>;

#[tonic::async_trait]
impl session_executor_server::SessionExecutor for ExecutorService {
    async fn execute(
        &self,
        request: Request<CommandRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        // The gateway's hop span, from the call's metadata: the executor's span continues it.
        let trace = agent_runtime_grpc::trace::extract(request.metadata());
        let request = request.into_inner();
        let mut context = context_from_proto(request.context)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        context.trace = trace;
        let command = ExecutorCommand::from_wire(&request.command_type, &request.data_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if !command.runs_while_draining() {
            self.accepting()?;
        }
        Ok(Response::new(reply(
            self.commands.execute(&context, command).await,
        )))
    }

    type SubscribeStream = FrameStream;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<FrameStream>, Status> {
        let request = request.into_inner();
        let context = context_from_proto(request.context)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let tenant = context.principal.tenant_id;
        let session_id = request.session_id;
        match self.store.get_session(&tenant, &session_id).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(Status::not_found("session not found")),
            Err(error) => return Err(store_status(&error)),
        }
        if let Err(error) = self
            .store
            .read_events(&tenant, &session_id, request.after, 1)
            .await
        {
            return Err(store_status(&error));
        }
        let options = FollowOptions {
            flush_on_stop: None,
            idle: Duration::from_secs(15),
            // The writer of the session may be another executor (just after a failover): the
            // store is then re-read at least this often.
            recheck: Duration::from_secs(1),
            stop: self.stop.child_token(),
        };
        let log: Arc<dyn EventReader> = self.tails.clone();
        let signal: Arc<dyn LiveSignal> = self.tails.clone();
        let frames = follow(log, signal, tenant, session_id, request.after, options).filter_map(
            |item| async move {
                match item {
                    Ok(Followed::Event(event)) => Some(Ok(EventFrame {
                        sequence: event.sequence,
                        envelope_json: event.json().as_bytes().to_vec(),
                    })),
                    Ok(Followed::Idle) => None,
                    Err(error) => Some(Err(store_status(&error))),
                }
            },
        );
        Ok(Response::new(Box::pin(frames)))
    }

    async fn load(&self, _request: Request<LoadRequest>) -> Result<Response<LoadReply>, Status> {
        let sessions = self
            .leases
            .snapshot()
            .into_iter()
            .map(|(tenant_id, session_id, fencing_token)| LoadedSession {
                tenant_id,
                session_id,
                fencing_token,
            })
            .collect();
        Ok(Response::new(LoadReply {
            worker_id: self.identity.worker_id.clone(),
            capacity: self.identity.capacity,
            active_sessions: self.executor.loaded_sessions().len() as u32,
            draining: self.draining.load(Ordering::SeqCst),
            sessions,
        }))
    }

    async fn release(
        &self,
        request: Request<SessionKey>,
    ) -> Result<Response<ReleaseReply>, Status> {
        let key = request.into_inner();
        let held = self.executor.release(&key.tenant_id, &key.session_id).await;
        Ok(Response::new(ReleaseReply { held }))
    }

    async fn take(&self, request: Request<SessionKey>) -> Result<Response<TakeReply>, Status> {
        self.accepting()?;
        let key = request.into_inner();
        let outcome = match self.executor.take(&key.tenant_id, &key.session_id).await {
            Ok(token) => take_reply::Outcome::FencingToken(token),
            Err(error) => take_reply::Outcome::Failure(failure_to_proto(&error)),
        };
        Ok(Response::new(TakeReply {
            outcome: Some(outcome),
        }))
    }

    async fn tools(&self, request: Request<TenantRequest>) -> Result<Response<ToolsReply>, Status> {
        let tenant = request.into_inner().tenant_id;
        let tools = self
            .executor
            .offered_tools(&tenant)
            .into_iter()
            .map(|(name, description)| OfferedTool { name, description })
            .collect();
        Ok(Response::new(ToolsReply { tools }))
    }
}

/// The status of a `Subscribe` whose store read failed. Exhaustive: a new kind of store error is
/// placed here on purpose.
fn store_status(error: &StoreError) -> Status {
    match error {
        StoreError::StaleCursor(message) => Status::failed_precondition(message.clone()),
        StoreError::InvalidArgument(_)
        | StoreError::CommandLeaseLost(_)
        | StoreError::NotOpen(_)
        | StoreError::Runtime { .. }
        | StoreError::Backend { .. }
        | StoreError::Conflict(_) => {
            tracing::warn!(error = %error, "store failure in a gRPC call");
            Status::unavailable("store unavailable")
        }
    }
}

/// Serves the executor, `grpc.health.v1` and reflection on `listener` until `shutdown` fires.
/// How many stream resets a peer's protocol errors may cause on one connection (h2's and hyper's
/// own default) before the connection is ended.
const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// The executor service and reflection require the cluster secret; health does not, so that
/// orchestrators can probe it. Once `draining` fires, health answers `NOT_SERVING` (for the
/// executor service and for the whole server, `""`) while calls are still served.
pub async fn serve_grpc(
    service: ExecutorService,
    secret: Secret,
    listener: TcpListener,
    draining: CancellationToken,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<SessionExecutorServer<ExecutorService>>()
        .await;
    let reporter = health_reporter.clone();
    let health_watch = tokio::spawn(async move {
        draining.cancelled().await;
        reporter
            .set_not_serving::<SessionExecutorServer<ExecutorService>>()
            .await;
        reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
    });
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(agent_runtime_grpc::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor set is valid");
    let reflection_secret = secret.clone();
    let executor_secret = secret;
    let served = tonic::transport::Server::builder()
        // tonic passes `None` for this to hyper/h2 unless told, which turns h2's cap off: a peer
        // could then make the server reset streams without end ("MadeYouReset", CVE-2025-8671).
        // Past the cap the connection ends with GOAWAY ENHANCE_YOUR_CALM (RES-05).
        .http2_max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .add_service(health_service)
        .add_service(tonic::service::interceptor::InterceptedService::new(
            reflection,
            move |request| check_secret(&reflection_secret, request),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            SessionExecutorServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            move |request| check_secret(&executor_secret, request),
        ))
        .serve_with_incoming_shutdown(incoming(listener), shutdown.cancelled_owned())
        .await;
    health_watch.abort();
    served
}

/// The connections `listener` accepts, with TCP_NODELAY set. Without it a small response or event
/// frame that follows another one waits for the peer's delayed ACK (about 40 ms on Linux), a tail
/// far longer than a command takes. (`Server::tcp_nodelay` only applies to listeners tonic binds
/// itself.)
fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_send_small_frames_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut accepted = incoming(listener);
        let _client = tokio::net::TcpStream::connect(address).await.unwrap();
        let connection = accepted.next().await.unwrap().unwrap();
        assert!(connection.nodelay().unwrap());
    }
}
