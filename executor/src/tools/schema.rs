//! Validation of tool input against the tool's JSON schema (pipeline step 1). Supports the
//! subset the built-in tools' schemas use: `type`, `properties`, `required`,
//! `additionalProperties` (`false` or a schema), `items`, `enum`, `minimum`, `maximum`,
//! `minLength`, `maxLength`, `minItems`, `maxItems`.
//! Keywords outside the subset are ignored rather than refused, so a tool with a richer schema
//! still validates on what is understood.

use serde_json::Value;

/// Checks `value` against `schema`; the error names the offending field for the model.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "input")
}

// Stays whole: one arm per JSON Schema keyword.
fn check(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(kind) = schema.get("type").and_then(Value::as_str) {
        let ok = match kind {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "null" => value.is_null(),
            _ => true,
        };
        if !ok {
            return Err(format!("{at} must be of type {kind}"));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!(
            "{at} must be one of {}",
            Value::Array(options.clone())
        ));
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && number < min
        {
            return Err(format!("{at} must be at least {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && number > max
        {
            return Err(format!("{at} must be at most {max}"));
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && length < min
        {
            return Err(format!("{at} must have at least {min} characters"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && length > max
        {
            return Err(format!("{at} must have at most {max} characters"));
        }
    }
    if let Some(items) = value.as_array() {
        let count = items.len() as u64;
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && count < min
        {
            return Err(format!("{at} must have at least {min} items"));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && count > max
        {
            return Err(format!("{at} must have at most {max} items"));
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (index, item) in items.iter().enumerate() {
            check(schema, item, &format!("{at}[{index}]"))?;
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(name) {
                return Err(format!("{at}.{name} is required"));
            }
        }
        let additional = schema.get("additionalProperties");
        let closed = additional == Some(&Value::Bool(false));
        for (name, field) in object {
            match (properties.and_then(|p| p.get(name)), additional) {
                (Some(schema), _) => check(schema, field, &format!("{at}.{name}"))?,
                (None, _) if closed => return Err(format!("{at}.{name} is not a known field")),
                (None, Some(other @ Value::Object(_))) => {
                    check(other, field, &format!("{at}.{name}"))?;
                }
                (None, _) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate;
    use serde_json::json;

    #[test]
    fn lengths_counts_and_open_maps_are_checked() {
        let schema = json!({ "type": "object", "properties": {
            "header": { "type": "string", "maxLength": 3 },
            "list": { "type": "array", "minItems": 1, "maxItems": 2 },
            "env": { "type": "object", "additionalProperties": { "type": "string" } },
        }});
        assert!(
            validate(
                &schema,
                &json!({ "header": "abc", "list": [1], "env": { "A": "b" } })
            )
            .is_ok()
        );
        let too_long = validate(&schema, &json!({ "header": "abcd" })).unwrap_err();
        assert!(too_long.contains("at most 3 characters"), "{too_long}");
        assert!(
            validate(&schema, &json!({ "list": [] }))
                .unwrap_err()
                .contains("at least 1 items")
        );
        assert!(
            validate(&schema, &json!({ "list": [1, 2, 3] }))
                .unwrap_err()
                .contains("at most 2 items")
        );
        let not_text = validate(&schema, &json!({ "env": { "A": 1 } })).unwrap_err();
        assert!(
            not_text.contains("input.env.A must be of type string"),
            "{not_text}"
        );
    }

    #[test]
    fn the_subset_is_enforced() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "minLength": 1 },
                "limit": { "type": "integer", "minimum": 1 },
                "todos": { "type": "array", "items": { "type": "object",
                    "properties": { "status": { "enum": ["pending", "done"] } }, "required": ["status"] } },
            },
            "required": ["path"],
            "additionalProperties": false,
        });
        assert!(validate(&schema, &json!({ "path": "a", "limit": 2 })).is_ok());
        let errors = [
            (json!("a"), "input must be of type object"),
            (json!({}), "input.path is required"),
            (
                json!({ "path": "" }),
                "input.path must have at least 1 characters",
            ),
            (
                json!({ "path": "a", "limit": 0 }),
                "input.limit must be at least 1",
            ),
            (
                json!({ "path": "a", "limit": 1.5 }),
                "input.limit must be of type integer",
            ),
            (
                json!({ "path": "a", "x": 1 }),
                "input.x is not a known field",
            ),
            (
                json!({ "path": "a", "todos": [{ "status": "late" }] }),
                "input.todos[0].status must be one of",
            ),
        ];
        for (value, expected) in errors {
            let error = validate(&schema, &value).unwrap_err();
            assert!(error.starts_with(expected), "{value}: {error}");
        }
    }
}
