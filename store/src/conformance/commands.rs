//! Command receipts: claim, seal, complete, release, abandon (docs/storage.md §1.2; cases 2-6,
//! 16-20, 25-30, 59). Where the reference backends diverged, the PostgreSQL behaviour is the
//! contract (decision S6): no re-seal, no completion after abandonment, validated claim parameters.

use serde_json::json;

use super::Factory;
use super::support::*;
use crate::model::*;

/// Case 2.
pub async fn fresh_command_claim_is_claimed(factory: Factory) {
    let h = factory.start().await;
    let claim = h.claim(COMMAND, FINGERPRINT).await;
    assert!(
        matches!(&claim, CommandClaim::Claimed { lease_id } if !lease_id.is_empty()),
        "{claim:?}"
    );
}

/// Cases 3 and 59: the stored result comes back verbatim.
pub async fn completed_command_replays_its_result(factory: Factory) {
    let h = factory.start().await;
    let result = json!({ "ok": true, "value": { "sessionId": "s-1", "n": [1, 2, 3] } });
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    h.store
        .complete_command(TENANT, COMMAND, &lease_id, &result)
        .await
        .expect("complete");

    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
}

/// The write that takes a command's effect may complete its receipt and lose the answer; the caller
/// then completes it again. The same lease with the same result is a no-op; another result is
/// refused and the stored one kept.
pub async fn complete_again_is_a_no_op(factory: Factory) {
    let h = factory.start().await;
    let result = json!({ "ok": true, "value": { "n": [1, 2] } });
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    for _ in 0..2 {
        h.store
            .complete_command(TENANT, COMMAND, &lease_id, &result)
            .await
            .expect("complete");
    }
    let other = h
        .store
        .complete_command(TENANT, COMMAND, &lease_id, &json!({ "ok": false }))
        .await;
    expect_command_lease_lost(other);
    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
}

/// Case 4: a fingerprint mismatch wins over everything, even a stored result.
pub async fn completed_command_with_other_fingerprint_conflicts(factory: Factory) {
    let h = factory.start().await;
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    h.store
        .complete_command(TENANT, COMMAND, &lease_id, &json!({ "ok": true }))
        .await
        .expect("complete");

    let other = format!("{FINGERPRINT}-other");
    assert_eq!(h.claim(COMMAND, &other).await, CommandClaim::Conflict);
}

/// Cases 5, 6 and 25.
pub async fn abandoned_sealed_command_answers_abandoned_with_its_reason(factory: Factory) {
    let h = factory.start().await;
    h.sealed(COMMAND, FINGERPRINT).await;
    assert_eq!(h.claim(COMMAND, FINGERPRINT).await, SEALED_IN_PROGRESS);

    let changed = h
        .store
        .abandon_command(TENANT, COMMAND, "sealed window elapsed")
        .await
        .expect("abandon");

    assert!(changed);
    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        abandoned("sealed window elapsed")
    );
}

/// Case 16: an unexpired claim answers in progress with at most the time it has left.
pub async fn claim_before_expiry_is_in_progress(factory: Factory) {
    let h = factory.start().await;
    h.claimed(COMMAND, FINGERPRINT, 100).await;
    h.advance(40);

    match h.claim(COMMAND, FINGERPRINT).await {
        CommandClaim::InProgress { retry_after_ms } => {
            assert!((1..=100).contains(&retry_after_ms), "{retry_after_ms}")
        }
        other => panic!("expected in_progress, got {other:?}"),
    }
}

/// Case 17.
pub async fn claim_after_expiry_issues_a_new_lease(factory: Factory) {
    let h = factory.start().await;
    let first = h.claimed(COMMAND, FINGERPRINT, 100).await;
    h.advance(101);

    let replacement = h.claimed(COMMAND, FINGERPRINT, 100).await;

    assert_ne!(first, replacement);
}

/// `claim_and_seal_command` is a claim and its seal in one step. A fresh or expired
/// claim comes back sealed on its target (listed as unfinished, in progress to a retry, never
/// expiring); every other receipt answers exactly as to `claim_command` and is left unchanged.
pub async fn claim_and_seal_seals_what_it_claims_and_answers_the_rest_like_a_claim(
    factory: Factory,
) {
    let h = factory.start().await;
    let target = sealed_target();
    let claim_and_seal = |command: &'static str, fingerprint: &'static str| {
        let store = h.store.clone();
        let target = target.clone();
        async move {
            store
                .claim_and_seal_command(TENANT, command, fingerprint, 100, &target)
                .await
                .expect("claim and seal")
        }
    };
    let CommandClaim::Claimed { lease_id } = claim_and_seal(COMMAND, FINGERPRINT).await else {
        panic!("a fresh command is claimed");
    };
    h.advance(1_000);
    assert_eq!(h.claim(COMMAND, FINGERPRINT).await, SEALED_IN_PROGRESS);
    assert_eq!(
        claim_and_seal(COMMAND, FINGERPRINT).await,
        SEALED_IN_PROGRESS
    );
    let unfinished = h
        .store
        .list_unfinished_commands(None, 10)
        .await
        .expect("list");
    assert_eq!(unfinished.len(), 1, "{unfinished:?}");
    assert_eq!(unfinished[0].lease_id, lease_id);
    assert!(unfinished[0].sealed && unfinished[0].sealed_at_ms.is_some());
    assert_eq!(unfinished[0].target.as_ref(), Some(&target));

    let result = json!({ "ok": true, "value": { "n": 1 } });
    h.store
        .complete_command(TENANT, COMMAND, &lease_id, &result)
        .await
        .expect("complete");
    assert_eq!(
        claim_and_seal(COMMAND, FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
    assert_eq!(
        claim_and_seal(COMMAND, "another-fingerprint").await,
        CommandClaim::Conflict
    );

    // An expired, unsealed claim is taken over and sealed.
    let expired = h.claimed("c-expired", FINGERPRINT, 100).await;
    h.advance(101);
    let CommandClaim::Claimed { lease_id: taken } = claim_and_seal("c-expired", FINGERPRINT).await
    else {
        panic!("an expired claim is taken over");
    };
    assert_ne!(taken, expired);
    h.advance(1_000);
    assert_eq!(h.claim("c-expired", FINGERPRINT).await, SEALED_IN_PROGRESS);
}

/// Case 18.
pub async fn complete_with_a_replaced_lease_is_no_longer_active(factory: Factory) {
    let h = factory.start().await;
    let first = h.claimed(COMMAND, FINGERPRINT, 100).await;
    h.advance(101);
    h.claimed(COMMAND, FINGERPRINT, 100).await;

    let late = h
        .store
        .complete_command(TENANT, COMMAND, &first, &json!({ "ok": true }))
        .await;

    expect_command_lease_lost(late);
}

/// Case 19.
pub async fn completion_by_the_replacement_lease_wins(factory: Factory) {
    let h = factory.start().await;
    h.claimed(COMMAND, FINGERPRINT, 100).await;
    h.advance(101);
    let replacement = h.claimed(COMMAND, FINGERPRINT, 100).await;
    let result = json!({ "ok": true, "by": "replacement" });

    h.store
        .complete_command(TENANT, COMMAND, &replacement, &result)
        .await
        .expect("complete with the replacement lease");

    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
    assert_eq!(h.claim(COMMAND, "fp-2").await, CommandClaim::Conflict);
}

/// Case 20: release never reopens a sealed command, however much time passes.
pub async fn released_sealed_command_stays_in_progress(factory: Factory) {
    let h = factory.start().await;
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    h.store
        .release_command(TENANT, COMMAND, &lease_id)
        .await
        .expect("release is a silent no-op");
    h.advance(10_000);

    assert_eq!(h.claim(COMMAND, FINGERPRINT).await, SEALED_IN_PROGRESS);
}

/// A sealed command whose dispatch provably took no effect is reopened: its id claims again.
/// Only the holder of the seal can reopen it, and never once it has a result or was abandoned.
pub async fn reopened_sealed_command_can_be_claimed_again(factory: Factory) {
    let h = factory.start().await;
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    h.store
        .reopen_sealed_command(TENANT, COMMAND, "not-the-lease")
        .await
        .expect("a wrong lease is a silent no-op");
    assert_eq!(h.claim(COMMAND, FINGERPRINT).await, SEALED_IN_PROGRESS);
    h.store
        .reopen_sealed_command(TENANT, COMMAND, &lease_id)
        .await
        .expect("reopen");
    let again = h.claimed(COMMAND, FINGERPRINT, 30_000).await;
    assert_ne!(again, lease_id);

    let result = serde_json::json!({ "ok": true });
    h.store
        .complete_command(TENANT, COMMAND, &again, &result)
        .await
        .expect("complete");
    h.store
        .reopen_sealed_command(TENANT, COMMAND, &again)
        .await
        .expect("a completed command is a silent no-op");
    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
}

/// The commands in flight are listed, sealed ones with their seal's target, in key order and in
/// pages; completed, abandoned, released and reopened ones are not.
pub async fn unfinished_commands_are_listed_with_their_targets(factory: Factory) {
    let h = factory.start().await;
    let done = h.sealed("c-done", FINGERPRINT).await;
    h.store
        .complete_command(TENANT, "c-done", &done, &json!({ "ok": true }))
        .await
        .expect("complete");
    h.sealed("c-abandoned", FINGERPRINT).await;
    h.store
        .abandon_command(TENANT, "c-abandoned", "gone")
        .await
        .expect("abandon");
    let reopened = h.sealed("c-reopened", FINGERPRINT).await;
    h.store
        .reopen_sealed_command(TENANT, "c-reopened", &reopened)
        .await
        .expect("reopen");
    let released = h.claimed("c-released", FINGERPRINT, 30_000).await;
    h.store
        .release_command(TENANT, "c-released", &released)
        .await
        .expect("release");
    let first = h.sealed("c-1", FINGERPRINT).await;
    let second = h.claimed("c-2", FINGERPRINT, 30_000).await;

    let page = h
        .store
        .list_unfinished_commands(None, 1)
        .await
        .expect("list");
    let sealed_at_ms = page.first().and_then(|command| command.sealed_at_ms);
    assert!(
        sealed_at_ms.is_some(),
        "a sealed command says when it was sealed: {page:?}"
    );
    assert_eq!(
        page,
        vec![UnfinishedCommand {
            tenant_id: TENANT.to_owned(),
            command_id: "c-1".to_owned(),
            lease_id: first,
            sealed: true,
            sealed_at_ms,
            target: Some(sealed_target()),
        }]
    );
    let after = Some((TENANT.to_owned(), "c-1".to_owned()));
    let rest = h
        .store
        .list_unfinished_commands(after, 10)
        .await
        .expect("list");
    assert_eq!(
        rest,
        vec![UnfinishedCommand {
            tenant_id: TENANT.to_owned(),
            command_id: "c-2".to_owned(),
            lease_id: second,
            sealed: false,
            sealed_at_ms: None,
            target: None,
        }]
    );
}

/// The per-tenant budget of stored results keeps each tenant's newest finished receipts and
/// deletes the older ones past it, at most `limit` per call; other tenants, and commands still
/// in flight, are untouched.
pub async fn receipts_past_a_tenants_result_budget_are_reaped_oldest_first(factory: Factory) {
    let h = factory.start().await;
    let result = json!({ "ok": true, "data": { "padding": "x".repeat(100) } });
    let size = serde_json::to_string(&result).unwrap().len() as u64;
    for command in ["a-1", "a-2", "a-3"] {
        let lease = h.sealed(command, FINGERPRINT).await;
        h.store
            .complete_command(TENANT, command, &lease, &result)
            .await
            .unwrap();
        h.advance(1_000);
    }
    h.sealed("a-running", FINGERPRINT).await;
    let small = h
        .store
        .claim_command(OTHER_TENANT, "b-1", FINGERPRINT, 30_000)
        .await
        .unwrap();
    let CommandClaim::Claimed { lease_id } = small else {
        panic!("{small:?}");
    };
    h.store
        .complete_command(OTHER_TENANT, "b-1", &lease_id, &json!({ "ok": true }))
        .await
        .unwrap();

    // Within budget: nothing goes.
    let within = h.store.reap_receipts_over_budget(10 * size, 100).await;
    assert_eq!(within.unwrap(), 0);
    // Two results fit: the oldest of tenant A goes.
    let reaped = h.store.reap_receipts_over_budget(2 * size, 100).await;
    assert_eq!(reaped.unwrap(), 1);
    assert!(matches!(
        h.claim("a-1", FINGERPRINT).await,
        CommandClaim::Claimed { .. }
    ));
    for kept in ["a-2", "a-3"] {
        assert!(matches!(
            h.claim(kept, FINGERPRINT).await,
            CommandClaim::Completed { .. }
        ));
    }
    // A zero budget takes every finished receipt, `limit` at a time; in-flight ones stay.
    assert_eq!(h.store.reap_receipts_over_budget(0, 1).await.unwrap(), 1);
    assert_eq!(h.store.reap_receipts_over_budget(0, 100).await.unwrap(), 2);
    assert_eq!(h.claim("a-running", FINGERPRINT).await, SEALED_IN_PROGRESS);
}

/// Release of an unsealed claim frees the command for a safe retry.
pub async fn released_unsealed_claim_can_be_claimed_again(factory: Factory) {
    let h = factory.start().await;
    let first = h.claimed(COMMAND, FINGERPRINT, 30_000).await;
    h.store
        .release_command(TENANT, COMMAND, &first)
        .await
        .expect("release");

    let second = h.claimed(COMMAND, FINGERPRINT, 30_000).await;

    assert_ne!(first, second);
}

/// Release with a lease that does not hold the claim changes nothing.
pub async fn release_with_a_wrong_lease_is_a_no_op(factory: Factory) {
    let h = factory.start().await;
    h.claimed(COMMAND, FINGERPRINT, 30_000).await;
    h.store
        .release_command(TENANT, COMMAND, "not-the-lease")
        .await
        .expect("release never fails");

    let claim = h.claim(COMMAND, FINGERPRINT).await;

    assert!(
        matches!(claim, CommandClaim::InProgress { .. }),
        "{claim:?}"
    );
}

/// Case 26.
pub async fn abandon_keeps_the_first_reason(factory: Factory) {
    let h = factory.start().await;
    h.sealed(COMMAND, FINGERPRINT).await;
    assert!(
        h.store
            .abandon_command(TENANT, COMMAND, "first")
            .await
            .unwrap()
    );

    let again = h.store.abandon_command(TENANT, COMMAND, "second").await;

    assert_eq!(again, Ok(false));
    assert_eq!(h.claim(COMMAND, FINGERPRINT).await, abandoned("first"));
}

/// Case 27: a merely claimed command can still be released, so it is never abandoned.
pub async fn claimed_but_unsealed_command_cannot_be_abandoned(factory: Factory) {
    let h = factory.start().await;
    h.claimed(COMMAND, FINGERPRINT, 30_000).await;

    let changed = h.store.abandon_command(TENANT, COMMAND, "too early").await;

    assert_eq!(changed, Ok(false));
}

/// Case 28.
pub async fn completed_command_cannot_be_abandoned(factory: Factory) {
    let h = factory.start().await;
    let result = json!({ "ok": true });
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    h.store
        .complete_command(TENANT, COMMAND, &lease_id, &result)
        .await
        .expect("complete");

    let changed = h.store.abandon_command(TENANT, COMMAND, "late").await;

    assert_eq!(changed, Ok(false));
    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
}

/// Case 29.
pub async fn blank_abandon_reason_is_rejected(factory: Factory) {
    let h = factory.start().await;
    h.sealed(COMMAND, FINGERPRINT).await;

    let blank = h.store.abandon_command(TENANT, COMMAND, "   ").await;

    expect_invalid(blank, "reason");
}

/// Case 30.
pub async fn seal_with_a_wrong_lease_is_no_longer_active(factory: Factory) {
    let h = factory.start().await;
    h.claimed(COMMAND, FINGERPRINT, 30_000).await;

    let sealed = h
        .store
        .seal_command(TENANT, COMMAND, "wrong-lease", &sealed_target())
        .await;

    expect_command_lease_lost(sealed);
}

/// S6: sealing is `claimed -> sealed` only; a second seal is rejected.
pub async fn resealing_a_sealed_command_is_no_longer_active(factory: Factory) {
    let h = factory.start().await;
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;

    let again = h
        .store
        .seal_command(TENANT, COMMAND, &lease_id, &sealed_target())
        .await;

    expect_command_lease_lost(again);
}

/// S6: abandonment is terminal; completing afterwards is rejected and the claim stays abandoned.
pub async fn completing_an_abandoned_command_is_no_longer_active(factory: Factory) {
    let h = factory.start().await;
    let lease_id = h.sealed(COMMAND, FINGERPRINT).await;
    assert!(
        h.store
            .abandon_command(TENANT, COMMAND, "gone")
            .await
            .unwrap()
    );

    let late = h
        .store
        .complete_command(TENANT, COMMAND, &lease_id, &json!({ "ok": true }))
        .await;

    expect_command_lease_lost(late);
    assert_eq!(h.claim(COMMAND, FINGERPRINT).await, abandoned("gone"));
}

/// S6: blank ids and a TTL outside 1 ..= 24 h are rejected before anything is stored.
pub async fn claim_parameters_are_validated(factory: Factory) {
    let h = factory.start().await;
    let cases = [
        (" ", FINGERPRINT, 1000),
        (COMMAND, "", 1000),
        (COMMAND, FINGERPRINT, 0),
        (COMMAND, FINGERPRINT, MAX_LEASE_TTL_MS + 1),
    ];
    for (command_id, fingerprint, ttl_ms) in cases {
        let claim = h
            .store
            .claim_command(TENANT, command_id, fingerprint, ttl_ms)
            .await;
        assert!(
            matches!(claim, Err(crate::StoreError::InvalidArgument(_))),
            "claim({command_id:?}, {fingerprint:?}, {ttl_ms}) gave {claim:?}"
        );
    }

    h.claimed(COMMAND, FINGERPRINT, MAX_LEASE_TTL_MS).await;
}

/// Receipts are tenant-scoped: the same command id under another tenant is a fresh command.
pub async fn command_receipts_are_partitioned_by_tenant(factory: Factory) {
    let h = factory.start().await;
    h.sealed(COMMAND, FINGERPRINT).await;

    let other = h
        .store
        .claim_command(OTHER_TENANT, COMMAND, "other-fp", 30_000)
        .await
        .expect("claim");

    assert!(matches!(other, CommandClaim::Claimed { .. }), "{other:?}");
}

/// Whether an id holds a receipt (what a read under that id meets): claimed, sealed, completed
/// and abandoned receipts do, a released claim and another tenant's do not.
pub async fn a_receipt_is_found_by_its_id_within_its_tenant(factory: Factory) {
    let h = factory.start().await;
    let exists = |tenant: &'static str, id: &'static str| {
        let store = &h.store;
        async move { store.command_receipt_exists(tenant, id).await.unwrap() }
    };
    assert!(!exists(TENANT, COMMAND).await);
    let CommandClaim::Claimed { lease_id: claimed } = h.claim(COMMAND, FINGERPRINT).await else {
        panic!("a new id is claimed");
    };
    assert!(exists(TENANT, COMMAND).await);
    assert!(!exists(OTHER_TENANT, COMMAND).await);
    h.store
        .release_command(TENANT, COMMAND, &claimed)
        .await
        .unwrap();
    assert!(!exists(TENANT, COMMAND).await);
    let sealed = h.sealed("done", FINGERPRINT).await;
    assert!(exists(TENANT, "done").await);
    h.store
        .complete_command(TENANT, "done", &sealed, &json!({ "ok": true }))
        .await
        .unwrap();
    assert!(exists(TENANT, "done").await);
    h.sealed("given-up", FINGERPRINT).await;
    h.store
        .abandon_command(TENANT, "given-up", "sealed window elapsed")
        .await
        .unwrap();
    assert!(exists(TENANT, "given-up").await);
}

/// Receipt reaping (reliability IDEM-12, RES-13): finished receipts (completed or abandoned) at or
/// before the cutoff go, at most `limit` per call; claimed and sealed ones stay; a reaped id runs
/// as a new command.
pub async fn finished_receipts_are_reaped_after_their_retention(factory: Factory) {
    let h = factory.start().await;
    let completed = h.sealed("done", FINGERPRINT).await;
    h.store
        .complete_command(TENANT, "done", &completed, &json!({ "ok": true }))
        .await
        .unwrap();
    h.sealed("given-up", FINGERPRINT).await;
    h.store
        .abandon_command(TENANT, "given-up", "sealed window elapsed")
        .await
        .unwrap();
    h.sealed("running", FINGERPRINT).await;
    h.claim("claimed", FINGERPRINT).await;
    let finished_at = h.now();
    h.advance(1_000);
    let late = h.sealed("late", FINGERPRINT).await;
    h.store
        .complete_command(TENANT, "late", &late, &json!({ "ok": true }))
        .await
        .unwrap();

    assert_eq!(
        h.store
            .reap_command_receipts(finished_at - 1, 100)
            .await
            .unwrap(),
        0,
        "nothing finished that early"
    );
    assert_eq!(
        h.store.reap_command_receipts(finished_at, 1).await.unwrap(),
        1
    );
    assert_eq!(
        h.store
            .reap_command_receipts(finished_at, 100)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        h.store
            .reap_command_receipts(finished_at, 100)
            .await
            .unwrap(),
        0
    );

    // Reaped ids run as new commands, even with another fingerprint.
    for id in ["done", "given-up"] {
        assert!(matches!(
            h.claim(id, "another-fingerprint").await,
            CommandClaim::Claimed { .. }
        ));
    }
    assert_eq!(h.claim("running", FINGERPRINT).await, SEALED_IN_PROGRESS);
    assert!(matches!(
        h.claim("late", FINGERPRINT).await,
        CommandClaim::Completed { .. }
    ));
    assert!(matches!(
        h.claim("claimed", FINGERPRINT).await,
        CommandClaim::InProgress { .. }
    ));
}
