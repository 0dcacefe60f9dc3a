use std::sync::Mutex;

use super::*;

#[derive(Debug, Default)]
struct Counting(Mutex<Vec<&'static str>>);

impl Telemetry for Counting {
    fn record_command(&self, metric: &CommandMetric) -> Result<(), TelemetryError> {
        self.0.lock().unwrap().push(metric.command_type);
        Ok(())
    }
    fn record_store_call(&self, metric: &StoreCallMetric) -> Result<(), TelemetryError> {
        self.0.lock().unwrap().push(metric.operation);
        Ok(())
    }
}

#[derive(Debug)]
struct Broken;

impl Telemetry for Broken {
    fn record_command(&self, _: &CommandMetric) -> Result<(), TelemetryError> {
        panic!("a broken adapter")
    }
    fn record_store_call(&self, _: &StoreCallMetric) -> Result<(), TelemetryError> {
        Err(TelemetryError("unavailable".to_owned()))
    }
}

#[test]
fn fanout_reaches_every_adapter_even_when_one_fails() {
    let counting = Arc::new(Counting::default());
    let fanout = Fanout::new(vec![Arc::new(Broken), counting.clone(), Arc::new(Broken)]);
    let command = CommandMetric {
        command_type: "session.create",
        tenant_id: "tenant-a".to_owned(),
        subject: "user".to_owned(),
        duration_ms: 3,
        outcome: Outcome::Success,
        error_code: None,
    };
    assert!(fanout.record_command(&command).is_ok());
    let store_call = StoreCallMetric {
        operation: "claim_command",
        duration: std::time::Duration::from_millis(1),
        ok: true,
        fenced_off: 0,
    };
    assert!(fanout.record_store_call(&store_call).is_ok());
    // Methods an adapter does not implement do nothing.
    assert!(NoTelemetry.record_store_call(&store_call).is_ok());
    assert_eq!(
        *counting.0.lock().unwrap(),
        vec!["session.create", "claim_command"]
    );
}
