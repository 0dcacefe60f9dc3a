//! Webhooks from a cluster on PostgreSQL: two gateway processes deliver from one outbox to a slow
//! receiver (the Standard Webhooks reference library verifying each attempt); each delivery is
//! sent once, by one of them (a double claim would send it twice within a 0.2 s attempt).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::cluster::{Cluster, TENANT, create_session, submit};
use crate::support::webhooks::{Receiver, SECRET};
use crate::support::{ends_request, events_until};

#[tokio::test]
async fn two_gateways_deliver_each_webhook_once() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    receiver.set_mode("slow").await;
    let secret = dir.path().join("webhook-secret");
    std::fs::write(&secret, SECRET).unwrap();
    let webhooks = format!(
        "[webhooks]\npoll_interval_ms = 20\n\n[[webhooks.endpoints]]\nid = \"ops\"\ntenant = \"{TENANT}\"\nurl = \"{}/hook\"\nevents = [\"request.completed\"]\nsecret_file = \"{}\"\nallow_private_addresses = true\n\n",
        receiver.url,
        secret.display()
    );
    let cluster = Cluster::start_configured(None, &webhooks).await;

    // Four sessions, three requests each, through both gateways.
    let mut requests = 0;
    for n in 0..4 {
        let served = cluster.served(n % 2);
        let session = create_session(&served).await;
        for turn in 0..3 {
            let request = submit(&served, &session, &format!("turn {turn}")).await;
            events_until(&served, &session, |e| ends_request(e, &request)).await;
            requests += 1;
        }
    }
    receiver
        .wait_for("every request.completed", |seen| seen.len() >= requests)
        .await;
    // Both gateways keep polling: a second copy would arrive within a few of their polls.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;

    let received = receiver.received();
    assert!(received.iter().all(|line| line["verified"] == true));
    let mut by_id: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for line in &received {
        by_id
            .entry(line["id"].as_str().unwrap())
            .or_default()
            .push(line);
    }
    assert_eq!(
        by_id.len(),
        requests,
        "one delivery per committed request end"
    );
    for (id, attempts) in &by_id {
        assert_eq!(
            attempts.len(),
            1,
            "{id} was sent {} times: {attempts:?}",
            attempts.len()
        );
    }
}
