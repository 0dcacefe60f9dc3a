//! The suite macros. The case lists here must name every `pub async fn` of the seam modules: the
//! `compile_check` module below expands them inside this crate, so a misspelt case fails this
//! crate's own build, and its test fails when a case is missing from the lists.

/// Expands one `#[tokio::test]` per conformance case into `mod $module`, grouped by seam
/// (`$module::commands::claim_after_expiry_issues_a_new_lease`, ...). `$factory` is a path to an
/// `async fn(StoreConfigForTest) -> Harness`, resolved from the invoking module.
#[macro_export]
macro_rules! store_conformance_suite {
    ($module:ident, $factory:path) => {
        $crate::store_conformance_suite!(
            @with [::tokio::test(flavor = "multi_thread", worker_threads = 2)] $module, $factory
        );
    };
    (@with [$attr:meta] $module:ident, $factory:path) => {
        $crate::__store_conformance_cases! {
            [$attr] $module, $factory;
            commands: [
                fresh_command_claim_is_claimed,
                finished_receipts_are_reaped_after_their_retention,
                receipts_past_a_tenants_result_budget_are_reaped_oldest_first,
                completed_command_replays_its_result,
                complete_again_is_a_no_op,
                completed_command_with_other_fingerprint_conflicts,
                abandoned_sealed_command_answers_abandoned_with_its_reason,
                claim_before_expiry_is_in_progress,
                claim_after_expiry_issues_a_new_lease,
                claim_and_seal_seals_what_it_claims_and_answers_the_rest_like_a_claim,
                complete_with_a_replaced_lease_is_no_longer_active,
                completion_by_the_replacement_lease_wins,
                released_sealed_command_stays_in_progress,
                released_unsealed_claim_can_be_claimed_again,
                reopened_sealed_command_can_be_claimed_again,
                unfinished_commands_are_listed_with_their_targets,
                release_with_a_wrong_lease_is_a_no_op,
                abandon_keeps_the_first_reason,
                claimed_but_unsealed_command_cannot_be_abandoned,
                completed_command_cannot_be_abandoned,
                blank_abandon_reason_is_rejected,
                seal_with_a_wrong_lease_is_no_longer_active,
                resealing_a_sealed_command_is_no_longer_active,
                completing_an_abandoned_command_is_no_longer_active,
                claim_parameters_are_validated,
                command_receipts_are_partitioned_by_tenant,
                a_receipt_is_found_by_its_id_within_its_tenant,
            ],
            sessions: [
                sessions_are_partitioned_by_tenant,
                active_sessions_are_listed_across_tenants_in_key_order,
                closed_sessions_are_listed_by_age_and_purged_with_all_they_own,
                closed_sessions_past_a_byte_budget_are_listed_oldest_first,
                other_tenant_cannot_read_a_session,
                put_session_keeps_created_by_and_created_at,
                the_profile_is_kept_from_the_first_insert_and_never_shown,
                empty_session_metadata_reads_as_absent,
                sessions_list_newest_first_with_ties_by_id,
                session_list_pages_with_a_cursor,
                session_list_exact_last_page_has_no_cursor,
                session_list_defaults_to_50,
                session_list_limit_must_be_between_1_and_100,
                session_list_rejects_a_cursor_it_did_not_issue,
                open_store_is_healthy,
                deleting_a_tenant_leaves_nothing_of_it_and_all_of_the_others,
            ],
            events: [
                appended_events_get_consecutive_sequences,
                read_events_returns_appended_events_in_order,
                events_past_their_age_are_trimmed_keeping_each_sessions_newest,
                latest_sequence_and_range_track_the_head,
                repeated_idempotency_key_returns_the_original_event,
                concurrent_appends_with_one_key_resolve_to_one_event,
                unknown_idempotency_key_is_none,
                retention_drops_the_oldest_events,
                cursor_ahead_of_the_head_is_stale,
                event_page_limit_must_be_between_1_and_1000,
                read_events_pages_with_has_more,
                event_session_must_match_the_target_log,
                append_events_batch_is_contiguous,
                events_are_partitioned_by_tenant,
                wait_for_events_resolves_on_append,
                wait_for_events_resolves_when_newer_events_exist,
                appended_event_keeps_its_content,
                sse_01_concurrent_appenders_get_gapless_sequences,
            ],
            leases: [
                first_acquire_issues_token_1,
                reacquire_by_the_same_lease_and_owner_keeps_the_token,
                acquire_while_another_owner_is_active_conflicts,
                acquire_after_expiry_increments_the_token,
                acquire_after_release_increments_the_token,
                renew_extends_an_active_lease,
                renew_and_assert_after_expiry_are_lost,
                stale_lease_is_lost_after_a_successor,
                release_is_idempotent,
                release_after_expiry_succeeds,
                lease_requirement_is_sticky,
                acquire_validates_ttl_and_ids,
                leases_are_partitioned_by_tenant,
                fenced_write_without_any_lease_is_lost,
                unfenced_write_to_a_leased_session_requires_a_lease,
                stale_fence_after_a_successor_is_lost,
                expired_or_released_fence_is_lost,
                matching_fence_appends_contiguous_sequences,
            ],
            journal: [
                durable_appends_are_contiguous_from_1,
                durable_expected_sequence_mismatch_conflicts,
                invalid_durable_append_is_rejected,
                durable_quota_is_enforced,
                read_durable_pages_after_a_cursor,
                durable_cursor_and_limit_are_validated,
                durable_read_of_an_unknown_session_is_empty,
                durable_event_keeps_its_content,
                durable_journal_is_not_trimmed_by_event_retention,
                durable_journals_are_partitioned_by_tenant,
                a_request_step_stores_its_events_journal_entry_and_message_or_none,
            ],
            transcripts: [
                create_transcript_is_empty_and_idempotent,
                transcript_holds_messages_summary_and_pending_inputs,
                a_write_returns_the_entries_it_appended_as_stored,
                applied_and_cancelled_inputs_leave_the_queue,
                enqueue_input_upserts_by_input_id,
                readable_view_hides_unsettled_tool_calls,
                covered_request_id_is_kept_when_omitted,
                failed_history_progress_is_sticky_until_repaired,
                ordinary_writes_mark_history_in_progress_unless_failed,
                durable_request_completed_marks_history_complete,
                fork_copies_the_prefix_up_to_the_message,
                fork_at_an_unknown_message_is_invalid,
                deleted_transcript_is_gone,
                transcripts_list_in_ascending_id_order,
                transcripts_are_partitioned_by_tenant,
            ],
            routes: [
                enqueued_session_is_claimed_into_provisioning,
                claimed_session_requires_its_fence,
                route_transitions_follow_the_table_and_handoff_is_idempotent,
                disallowed_route_transition_is_a_state_conflict,
                draining_worker_cannot_claim,
                successor_claim_gets_a_higher_token,
                stale_owner_is_fenced_out_after_a_successor,
                settled_route_clears_ownership,
                failed_settlement_requires_failure_details,
                settle_is_idempotent_with_the_same_fence,
                claim_respects_worker_capacity,
                claim_order_is_priority_then_queue_time,
                claim_can_target_one_tenant_or_session,
                orphan_claims_skip_queued_sessions,
                enqueue_with_an_active_lease_conflicts,
                re_enqueue_keeps_attempt_and_token,
                claim_by_an_unknown_worker_is_not_found,
                claim_session_validates_its_arguments,
                renew_session_lease_moves_the_route_expiry,
                renew_session_leases_renews_each_and_reports_the_lost,
                releasing_the_execution_lease_suspends_an_active_route,
                list_worker_sessions_returns_owned_routes,
                count_worker_sessions_counts_owned_routes,
                count_held_sessions_counts_a_tenants_leased_active_routes,
            ],
            memories: [
                memories_are_saved_replaced_listed_by_name_and_deleted,
                memories_are_partitioned_by_tenant_and_scope,
                a_full_scope_refuses_new_names_but_replaces_existing_ones,
                invalid_memories_are_refused,
            ],
            webhooks: [
                deliveries_are_enqueued_with_their_cause_for_the_endpoints_that_want_them,
                claims_take_each_sessions_oldest_pending_delivery_once,
                a_failing_endpoint_is_disabled_and_re_enabled_by_the_operator,
                redelivery_keeps_the_id_and_reaping_bounds_the_outbox,
                endpoint_sync_updates_types_keeps_state_and_deletes_the_rest,
            ],
            recovery: [
                registered_worker_is_active_and_heartbeats_forward,
                expired_worker_goes_offline_and_its_route_is_suspended,
                expired_route_lease_is_suspended_while_its_worker_lives,
                recovered_session_is_reclaimed_under_a_higher_token,
                offline_worker_must_register_again,
                worker_with_an_expired_heartbeat_cannot_claim,
                unknown_worker_cannot_drain_or_heartbeat,
                sealed_command_is_abandoned_after_the_window,
                sweep_spares_claimed_and_completed_commands,
            ],
        }
    };
}

/// The cases that need the memory/JSONL trim hook (`Harness::with_trim_hook`); a backend without
/// the hook (PostgreSQL) does not invoke this macro.
#[macro_export]
macro_rules! store_test_hook_suite {
    ($module:ident, $factory:path) => {
        $crate::store_test_hook_suite!(
            @with [::tokio::test(flavor = "multi_thread", worker_threads = 2)] $module, $factory
        );
    };
    (@with [$attr:meta] $module:ident, $factory:path) => {
        $crate::__store_conformance_cases! {
            [$attr] $module, $factory;
            hooks: [idempotency_keys_outlive_a_trimmed_log],
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_cases {
    ([$attr:meta] $module:ident, $factory:path; $($seam:ident: [$($case:ident),* $(,)?]),* $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            #[allow(dead_code)]
            fn __conformance_factory() -> $crate::conformance::Factory {
                $crate::conformance::Factory::new($factory)
            }

            $(
                mod $seam {
                    $(
                        #[$attr]
                        async fn $case() {
                            $crate::conformance::$seam::$case(super::__conformance_factory()).await;
                        }
                    )*
                }
            )*
        }
    };
}

#[cfg(test)]
mod compile_check {
    use crate::conformance::{Harness, StoreConfigForTest};

    async fn no_backend(_config: StoreConfigForTest) -> Harness {
        unreachable!("the compile check never runs a case")
    }

    crate::store_conformance_suite!(@with [allow(dead_code)] suite, no_backend);
    crate::store_test_hook_suite!(@with [allow(dead_code)] hooks, no_backend);

    /// Every `pub async fn` of a seam module is a case, and a case that is not listed never runs.
    #[test]
    fn every_case_is_listed_in_a_suite_macro() {
        let macros = include_str!("suite.rs");
        let seams = [
            include_str!("commands.rs"),
            include_str!("sessions.rs"),
            include_str!("events.rs"),
            include_str!("leases.rs"),
            include_str!("journal.rs"),
            include_str!("transcripts.rs"),
            include_str!("routes.rs"),
            include_str!("memories.rs"),
            include_str!("webhooks.rs"),
            include_str!("recovery.rs"),
            include_str!("hooks.rs"),
        ];
        let cases = seams
            .iter()
            .flat_map(|source| source.lines())
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .filter_map(|rest| rest.split('(').next());
        let unlisted: Vec<&str> = cases
            .filter(|case| {
                !macros.contains(&format!(" {case},")) && !macros.contains(&format!("[{case}]"))
            })
            .collect();
        assert!(
            unlisted.is_empty(),
            "cases missing from the suite macros: {unlisted:?}"
        );
    }
}
