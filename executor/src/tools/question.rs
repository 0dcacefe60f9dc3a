//! `AskUserQuestion`: the agent asks the user one to four multiple-choice questions
//! (docs/agent.md §6.10).
//!
//! Over protocol v1 the questions reach the user as `permission.requested` (`toolName`
//! `AskUserQuestion`, `input: {questions}`, `kind: "question"`), and the answer comes back in
//! `permission.resolve`'s `reason`, which the unmodified reference client can send: either JSON
//! `{"answers": {"<header>": "<label>" | ["<label>", …]}}` or free text, taken as the answer to
//! the first question. `approved: false` or no answer in time gives the model the cancelled
//! text, not an error.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::output::{failure, success};
use super::{Tool, ToolContext, ToolEffect, ToolOutcome, UserPrompt};
use crate::provider::ToolSpec;

pub const ASK_USER_QUESTION_TOOL: &str = "AskUserQuestion";

const CANCELLED: &str = "User cancelled the question prompt without providing answers.";
const NO_ANSWERS: &str = "The question was approved but no answers were collected. If you still \
    need the information, ask the user directly in your reply.";

#[derive(Debug, Default)]
pub struct AskUserQuestionTool;

fn questions(input: &Value) -> &[Value] {
    input["questions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

#[async_trait]
impl Tool for AskUserQuestionTool {
    fn spec(&self) -> ToolSpec {
        let option = json!({
            "type": "object",
            "properties": {
                "label": { "type": "string", "minLength": 1 },
                "description": { "type": "string" },
            },
            "required": ["label", "description"],
            "additionalProperties": false,
        });
        ToolSpec {
            name: ASK_USER_QUESTION_TOOL.to_owned(),
            description: "Asks the user 1-4 multiple-choice questions and returns the answers. \
                Each question has a short header (at most 12 characters) and 2-4 options."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "questions": {
                    "type": "array", "minItems": 1, "maxItems": 4,
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": { "type": "string", "minLength": 1 },
                            "header": { "type": "string", "minLength": 1, "maxLength": 12 },
                            "multiSelect": { "type": "boolean" },
                            "options": { "type": "array", "minItems": 2, "maxItems": 4, "items": option },
                        },
                        "required": ["question", "header", "multiSelect", "options"],
                        "additionalProperties": false,
                    },
                }},
                "required": ["questions"],
                "additionalProperties": false,
            }),
        }
    }

    /// Changes nothing; its prompt is its own (the pipeline always asks).
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, _input: &Value) -> String {
        "Question from the agent".to_owned()
    }

    fn user_prompt(&self, input: &Value) -> Option<UserPrompt> {
        let first = questions(input)
            .first()
            .and_then(|q| q["question"].as_str())
            .unwrap_or_default();
        Some(UserPrompt {
            title: self.approval_title(input),
            message: first.to_owned(),
            kind: Some("question".to_owned()),
        })
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let Some(answer) = context.answer else {
            return failure(
                "No confirmation handler available. Cannot ask user questions in \
                 non-interactive mode.",
            );
        };
        if !answer.approved {
            return success(Value::from(CANCELLED), "Cancelled");
        }
        let reason = answer.reason.as_deref().map(str::trim).unwrap_or_default();
        if reason.is_empty() {
            return success(Value::from(NO_ANSWERS), "No answers");
        }
        let lines = answer_lines(questions(&input), reason);
        success(
            Value::from(format!("User answers:\n{}", lines.join("\n"))),
            "Answered",
        )
    }
}

/// `<header>: <answer>` lines, in the order of the questions (answers to headers that were not
/// asked come after them). A reason that is not the JSON answer shape answers the first question.
fn answer_lines(questions: &[Value], reason: &str) -> Vec<String> {
    let answers = serde_json::from_str::<Value>(reason)
        .ok()
        .and_then(|value| value.get("answers")?.as_object().cloned());
    let Some(mut answers) = answers else {
        let header = questions
            .first()
            .and_then(|q| q["header"].as_str())
            .unwrap_or("Answer");
        return vec![format!("{header}: {reason}")];
    };
    let mut lines = Vec::new();
    for header in questions.iter().filter_map(|q| q["header"].as_str()) {
        if let Some(value) = answers.remove(header) {
            lines.push(format!("{header}: {}", answer_text(&value)));
        }
    }
    lines.extend(
        answers
            .into_iter()
            .map(|(header, value)| format!("{header}: {}", answer_text(&value))),
    );
    if lines.is_empty() {
        lines.push(NO_ANSWERS.to_owned());
    }
    lines
}

fn answer_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map_or_else(|| item.to_string(), str::to_owned)
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::UserAnswer;

    fn input() -> Value {
        json!({"questions": [
            {"question": "Which database?", "header": "Database", "multiSelect": false,
             "options": [{"label": "PostgreSQL", "description": "shared"}, {"label": "JSONL", "description": "embedded"}]},
            {"question": "Which features?", "header": "Features", "multiSelect": true,
             "options": [{"label": "Auth", "description": ""}, {"label": "Metrics", "description": ""}]}
        ]})
    }

    async fn answered(approved: bool, reason: Option<&str>) -> ToolOutcome {
        let context = ToolContext {
            answer: Some(UserAnswer {
                approved,
                reason: reason.map(str::to_owned),
            }),
            ..ToolContext::detached()
        };
        AskUserQuestionTool.run(input(), context).await
    }

    #[tokio::test]
    async fn json_answers_become_one_line_per_question_in_order() {
        let reason = r#"{"answers": {"Features": ["Auth", "Metrics"], "Database": "PostgreSQL"}}"#;
        let outcome = answered(true, Some(reason)).await;
        assert!(!outcome.is_error);
        assert_eq!(
            outcome.output,
            "User answers:\nDatabase: PostgreSQL\nFeatures: Auth, Metrics"
        );
    }

    #[tokio::test]
    async fn free_text_answers_the_first_question_and_a_refusal_cancels() {
        let outcome = answered(true, Some("SQLite, please")).await;
        assert_eq!(outcome.output, "User answers:\nDatabase: SQLite, please");
        let outcome = answered(false, Some("not now")).await;
        assert!(!outcome.is_error);
        assert_eq!(outcome.output, CANCELLED);
        let outcome = answered(true, None).await;
        assert_eq!(outcome.output, NO_ANSWERS);
        let outcome = AskUserQuestionTool
            .run(input(), ToolContext::detached())
            .await;
        assert!(outcome.is_error);
    }

    #[test]
    fn the_schema_holds_the_reference_limits() {
        let schema = AskUserQuestionTool.spec().input_schema;
        assert!(crate::tools::schema::validate(&schema, &input()).is_ok());
        let question = input()["questions"][0].clone();
        let five = json!({ "questions": vec![question.clone(); 5] });
        assert!(crate::tools::schema::validate(&schema, &five).is_err());
        let mut long_header = input();
        long_header["questions"][0]["header"] = json!("thirteen char");
        assert!(crate::tools::schema::validate(&schema, &long_header).is_err());
        let mut one_option = input();
        one_option["questions"][0]["options"] = json!([{ "label": "only", "description": "" }]);
        assert!(crate::tools::schema::validate(&schema, &one_option).is_err());
    }

    #[test]
    fn the_prompt_is_a_question_showing_the_first_one() {
        let prompt = AskUserQuestionTool.user_prompt(&input()).unwrap();
        assert_eq!(prompt.kind.as_deref(), Some("question"));
        assert_eq!(prompt.title, "Question from the agent");
        assert_eq!(prompt.message, "Which database?");
    }
}
