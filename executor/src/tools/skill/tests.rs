use super::*;
use crate::tools::state_extensions;

fn review(scope: PatchScope) -> SkillDefinition {
    SkillDefinition {
        system_prompt_append: None,
        model: None,
        name: "code-review".into(),
        description: "Reviews code for bugs.".into(),
        instructions: "Review {{args}} carefully. Run !`rm -rf /` never.".into(),
        allowed_tools: Some(vec!["Read".into(), "Grep".into()]),
        disallowed_tools: vec!["Grep".into()],
        scope,
    }
}

fn user(text: &str) -> Arc<ModelMessage> {
    Arc::new(ModelMessage::new(Role::User, text))
}

async fn load(skill: SkillDefinition, args: &str) -> (ToolOutcome, Arc<ModelMessage>) {
    let tool = SkillTool {
        skills: vec![skill],
    };
    let outcome = tool
        .run(
            json!({ "skill": "code-review", "args": args }),
            ToolContext::detached(),
        )
        .await;
    let message = Arc::new(ModelMessage {
        tool_call_id: Some("call-1".into()),
        name: Some(SKILL_TOOL.into()),
        extensions: outcome.state.clone().map(state_extensions),
        ..ModelMessage::new(Role::Tool, outcome.output.to_string())
    });
    (outcome, message)
}

#[tokio::test]
async fn loading_a_skill_answers_its_instructions_and_patches_the_tool_policy() {
    let (outcome, _) = load(review(PatchScope::Session), "src/lib.rs").await;
    assert!(!outcome.is_error);
    let text = outcome.output.as_str().unwrap();
    assert!(text.starts_with("# Skill: code-review\n"), "{text}");
    assert!(text.contains("Review src/lib.rs carefully."), "{text}");
    assert!(
        text.contains("!`rm -rf /`"),
        "inline commands stay text: {text}"
    );
    let patch = outcome.patch.unwrap();
    assert_eq!(patch.source, PatchSource::Skill);
    assert_eq!(patch.scope, PatchScope::Session);
    let policy = patch.tool_policy.unwrap();
    assert!(permits(&policy, "Read"));
    assert!(!permits(&policy, "Grep"), "denied beats allowed");
    assert!(!permits(&policy, "Write"));
    assert!(permits(&policy, SKILL_TOOL));

    let missing = SkillTool {
        skills: vec![review(PatchScope::Session)],
    }
    .run(json!({ "skill": "deploy" }), ToolContext::detached())
    .await;
    assert_eq!(
        missing.output["error"],
        "Skill \"deploy\" not found. Available skills: code-review"
    );
}

#[tokio::test]
async fn a_turn_skill_ends_with_its_request_and_a_session_skill_lasts() {
    let (_, turn) = load(review(PatchScope::Turn), "").await;
    let (_, session) = load(review(PatchScope::Session), "").await;
    assert!(active_policy(&[user("go"), turn.clone()]).is_some());
    assert!(active_policy(&[user("go"), turn, user("next")]).is_none());
    let lasting = active_policy(&[user("go"), session, user("next")]);
    assert_eq!(
        lasting.map(|(name, _)| name).as_deref(),
        Some("code-review")
    );
    assert!(active_policy(&[user("nothing loaded")]).is_none());
}

#[test]
fn definitions_the_reference_would_not_load_are_refused() {
    let mut bad = review(PatchScope::Session);
    bad.name = "Code Review".into();
    assert!(bad.validate().is_err());
    bad.name = "ok".into();
    bad.instructions = "  ".into();
    assert!(bad.validate().is_err());
    assert!(review(PatchScope::Turn).validate().is_ok());
}
