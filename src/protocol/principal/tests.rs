use super::*;
use crate::protocol::error::ErrorCode;

const USER_SCOPES: [Scope; 4] = [
    Scope::SessionCreate,
    Scope::SessionRead,
    Scope::SessionWrite,
    Scope::PermissionResolve,
];

#[test]
fn valid_principal_passes() {
    let principal = Principal::new("tenant-a", "user-a", &USER_SCOPES);
    assert!(principal.validate().is_ok());
    assert!(
        Principal::new("t", "ünïcode \u{85}user", &[])
            .validate()
            .is_ok()
    );
}

#[test]
fn item_9_nul_in_tenant_or_leading_space_in_subject_is_unauthenticated() {
    for principal in [
        Principal::new("tenant-a\u{0}tenant-b", "user-a", &USER_SCOPES),
        Principal::new("tenant-a", " user-a", &USER_SCOPES),
    ] {
        let error = principal.validate().unwrap_err();
        assert_eq!(error.code, ErrorCode::Unauthenticated);
        assert_eq!(
            error.message,
            "Principal tenantId, subject, or scopes are invalid"
        );
    }
}

#[test]
fn subject_rules() {
    assert!(is_valid_subject(&"s".repeat(256)));
    assert!(!is_valid_subject(&"s".repeat(257)));
    // 128 astral characters are 256 UTF-16 code units; one more is too many.
    assert!(is_valid_subject(&"\u{1F600}".repeat(128)));
    assert!(!is_valid_subject(&"\u{1F600}".repeat(129)));
    assert!(!is_valid_subject(""));
    assert!(!is_valid_subject("user\t"));
    assert!(!is_valid_subject("\u{A0}user"));
    assert!(!is_valid_subject("us\u{1F}er"));
    assert!(!is_valid_subject("us\u{7F}er"));
}

#[test]
fn unknown_scope_is_an_invalid_principal() {
    let error = Principal::from_parts("tenant-a", "user-a", &["session:read", "root"]).unwrap_err();
    assert_eq!(error.code, ErrorCode::Unauthenticated);
    let principal = Principal::from_parts("tenant-a", "user-a", &["session:read"]).unwrap();
    assert_eq!(principal.scopes, vec![Scope::SessionRead]);
}

#[test]
fn admin_satisfies_every_scope() {
    let admin = Principal::new("tenant-a", "root", &[Scope::SessionAdmin]);
    for scope in Scope::ALL {
        assert!(admin.has_scope(scope), "{scope:?}");
    }
    assert!(admin.require_scopes(&Scope::ALL).is_ok());
}

#[test]
fn missing_scope_is_forbidden_naming_the_scope() {
    let reader = Principal::new("tenant-a", "user-a", &[Scope::SessionRead]);
    assert!(reader.has_scope(Scope::SessionRead));
    assert!(!reader.has_scope(Scope::SessionCreate));
    let error = reader
        .require_scopes(&[Scope::SessionRead, Scope::SessionCreate])
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Forbidden);
    assert_eq!(error.message, "Missing required scope: session:create");
    assert_eq!(error.http_status(), 403);
}

#[test]
fn scopes_use_their_wire_spelling() {
    for scope in Scope::ALL {
        let json = serde_json::to_value(scope).unwrap();
        assert_eq!(json, scope.as_str());
        assert_eq!(Scope::parse(scope.as_str()), Some(scope));
    }
}
