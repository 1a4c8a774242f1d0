//! Table definitions, kept in step with `migrations/` by hand (the same portable SQL
//! serves both backends, so there is one schema).

diesel::table! {
    users (id) {
        id -> Text,
        email -> Text,
        name -> Nullable<Text>,
        password_hash -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    organizations (id) {
        id -> Text,
        name -> Text,
        plan -> Text,
        governed_requests -> BigInt,
        usage_period_start -> BigInt,
        upgrade_url -> Nullable<Text>,
        customer_upgrade_url -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    memberships (org_id, user_id) {
        org_id -> Text,
        user_id -> Text,
        role -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    sessions (id) {
        id -> Text,
        user_id -> Text,
        org_id -> Nullable<Text>,
        created_at -> BigInt,
        expires_at -> BigInt,
    }
}

diesel::table! {
    invitations (id) {
        id -> Text,
        org_id -> Text,
        email -> Text,
        role -> Text,
        token_hash -> Text,
        invited_by -> Text,
        created_at -> BigInt,
        expires_at -> BigInt,
        accepted_at -> Nullable<BigInt>,
        revoked_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    api_keys (id) {
        id -> Text,
        org_id -> Text,
        user_id -> Text,
        name -> Text,
        key_prefix -> Text,
        key_hash -> Text,
        default_tags -> Text,
        allowed_models -> Nullable<Text>,
        allowed_providers -> Nullable<Text>,
        allowed_customers -> Nullable<Text>,
        require_customer_id -> Bool,
        api_version -> Nullable<Text>,
        last_used_at -> Nullable<BigInt>,
        created_at -> BigInt,
        revoked_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    audit_events (id) {
        id -> Text,
        org_id -> Text,
        actor_id -> Nullable<Text>,
        action -> Text,
        resource_type -> Text,
        resource_id -> Nullable<Text>,
        metadata -> Text,
        created_at -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    users,
    organizations,
    memberships,
    sessions,
    invitations,
    api_keys,
    audit_events,
);
