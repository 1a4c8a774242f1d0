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
        unpriced_models -> Text,
        unpriced_tools -> Text,
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
        require_stored_credentials -> Bool,
        allowed_tools -> Nullable<Text>,
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

diesel::table! {
    budgets (id) {
        id -> Text,
        org_id -> Text,
        entity_type -> Text,
        entity_id -> Text,
        max_budget_microdollars -> BigInt,
        spend_microdollars -> BigInt,
        reserved_microdollars -> BigInt,
        policy -> Text,
        reset_interval -> Nullable<Text>,
        current_period_start -> Nullable<BigInt>,
        threshold_percentages -> Text,
        velocity_limit_microdollars -> Nullable<BigInt>,
        velocity_window_seconds -> Nullable<BigInt>,
        velocity_cooldown_seconds -> Nullable<BigInt>,
        session_limit_microdollars -> Nullable<BigInt>,
        finalization_reserve_microdollars -> Nullable<BigInt>,
        loop_max_calls -> Nullable<BigInt>,
        loop_window_seconds -> Nullable<BigInt>,
        loop_aggregate_max_keys -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
        spend_seq -> BigInt,
        exact_ceiling -> Bool,
    }
}

diesel::table! {
    budget_reservations (id) {
        id -> Text,
        budget_id -> Text,
        amount_microdollars -> BigInt,
        instance_id -> Text,
        expires_at -> BigInt,
    }
}

diesel::table! {
    budget_leases (id) {
        id -> Text,
        budget_id -> Text,
        instance_id -> Text,
        amount_microdollars -> BigInt,
        tight -> Bool,
        updated_at -> BigInt,
    }
}

diesel::table! {
    cost_events (id) {
        id -> Text,
        org_id -> Text,
        request_id -> Text,
        api_key_id -> Nullable<Text>,
        user_id -> Nullable<Text>,
        provider -> Text,
        model -> Text,
        input_tokens -> BigInt,
        output_tokens -> BigInt,
        cached_input_tokens -> BigInt,
        reasoning_tokens -> BigInt,
        cost_microdollars -> BigInt,
        duration_ms -> Nullable<BigInt>,
        upstream_duration_ms -> Nullable<BigInt>,
        session_id -> Nullable<Text>,
        trace_id -> Nullable<Text>,
        event_type -> Text,
        tool_name -> Nullable<Text>,
        tool_server -> Nullable<Text>,
        tags -> Text,
        customer_id -> Nullable<Text>,
        cost_breakdown -> Nullable<Text>,
        source -> Text,
        budget_status -> Text,
        action_id -> Nullable<Text>,
        estimated -> Bool,
        created_at -> BigInt,
        tool_calls_requested -> Nullable<Text>,
        tool_definition_tokens -> BigInt,
        dedup_key -> Text,
        fold_seq -> Nullable<BigInt>,
    }
}

diesel::table! {
    fold_marks (name) {
        name -> Text,
        seq -> BigInt,
    }
}

diesel::table! {
    trace_spans (org_id, trace_id) {
        org_id -> Text,
        trace_id -> Text,
        first_at -> BigInt,
        last_at -> BigInt,
        span_class -> BigInt,
        cost -> BigInt,
        event_count -> BigInt,
        firm_cost -> BigInt,
        firm_count -> BigInt,
    }
}

diesel::table! {
    budget_changes (id) {
        id -> Text,
        org_id -> Text,
        entity_type -> Text,
        entity_id -> Text,
        changed_at -> BigInt,
    }
}

diesel::table! {
    provider_credentials (id) {
        id -> Text,
        org_id -> Text,
        upstream -> Text,
        name -> Nullable<Text>,
        encrypted_secret -> Text,
        secret_prefix -> Text,
        created_at -> BigInt,
        updated_at -> BigInt,
        details -> Nullable<Text>,
    }
}

diesel::table! {
    provider_credential_changes (id) {
        id -> Text,
        org_id -> Text,
        upstream -> Text,
        changed_at -> BigInt,
    }
}

diesel::table! {
    mcp_servers (id) {
        id -> Text,
        org_id -> Text,
        name -> Text,
        url -> Text,
        header_names -> Text,
        encrypted_headers -> Nullable<Text>,
        created_at -> BigInt,
    }
}

diesel::table! {
    mcp_server_changes (id) {
        id -> Text,
        org_id -> Text,
        name -> Text,
        changed_at -> BigInt,
    }
}

diesel::table! {
    model_prices (id) {
        id -> Text,
        org_id -> Text,
        provider -> Text,
        model -> Text,
        input -> BigInt,
        output -> BigInt,
        cached_input -> Nullable<BigInt>,
        cache_write_5m -> Nullable<BigInt>,
        cache_write_1h -> Nullable<BigInt>,
        reasoning_output -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    model_price_changes (id) {
        id -> Text,
        org_id -> Text,
        changed_at -> BigInt,
    }
}

diesel::table! {
    key_changes (id) {
        id -> Text,
        org_id -> Text,
        key_hash -> Nullable<Text>,
        changed_at -> BigInt,
    }
}

diesel::table! {
    cost_event_bodies (event_id) {
        event_id -> Text,
        org_id -> Text,
        request_body -> Nullable<Text>,
        response_body -> Nullable<Text>,
        request_truncated -> Bool,
        response_truncated -> Bool,
        created_at -> BigInt,
    }
}

diesel::table! {
    cost_event_tags (event_id, tag_key) {
        event_id -> Text,
        org_id -> Text,
        tag_key -> Text,
        tag_value -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    cost_rollups (org_id, dim, name, grain, bucket, label1, label2, estimated) {
        org_id -> Text,
        dim -> Text,
        name -> Text,
        grain -> Text,
        bucket -> BigInt,
        label1 -> Text,
        label2 -> Text,
        estimated -> Bool,
        event_count -> BigInt,
        cost_hi -> BigInt,
        cost_lo -> BigInt,
        input_hi -> BigInt,
        input_lo -> BigInt,
        output_hi -> BigInt,
        output_lo -> BigInt,
        cached_hi -> BigInt,
        cached_lo -> BigInt,
        reasoning_hi -> BigInt,
        reasoning_lo -> BigInt,
        duration_hi -> BigInt,
        duration_lo -> BigInt,
        duration_count -> BigInt,
        bd_input_hi -> BigInt,
        bd_input_lo -> BigInt,
        bd_output_hi -> BigInt,
        bd_output_lo -> BigInt,
        bd_cached_hi -> BigInt,
        bd_cached_lo -> BigInt,
        bd_reasoning_hi -> BigInt,
        bd_reasoning_lo -> BigInt,
    }
}

diesel::table! {
    rollup_backfill (id) {
        id -> BigInt,
        done_at -> Nullable<BigInt>,
        dims -> Nullable<Text>,
    }
}

diesel::table! {
    event_outbox (id) {
        id -> Text,
        org_id -> Text,
        event_type -> Text,
        payload -> Text,
        created_at -> BigInt,
        dispatched_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    idempotency_keys (id) {
        id -> Text,
        request_hash -> Text,
        state -> Text,
        response_status -> Nullable<BigInt>,
        response_body -> Nullable<Text>,
        created_at -> BigInt,
        expires_at -> BigInt,
        owner_instance -> Nullable<Text>,
    }
}

diesel::table! {
    instances (id) {
        id -> Text,
        started_at -> BigInt,
        last_seen -> BigInt,
    }
}

diesel::table! {
    tool_costs (id) {
        id -> Text,
        org_id -> Text,
        user_id -> Text,
        server_name -> Text,
        tool_name -> Text,
        cost_microdollars -> BigInt,
        suggested_cost -> Nullable<BigInt>,
        source -> Text,
        description -> Nullable<Text>,
        annotations -> Nullable<Text>,
        last_seen_at -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    customer_bindings (id) {
        id -> Text,
        org_id -> Text,
        customer_id -> Text,
        plan_ref -> Text,
        budget_cap_microdollars -> BigInt,
        margin_target_percent -> Nullable<BigInt>,
        status -> Text,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    processor_connections (org_id) {
        org_id -> Text,
        id -> Text,
        key_ciphertext -> Text,
        key_prefix -> Text,
        status -> Text,
        created_at -> BigInt,
        last_sync_at -> Nullable<BigInt>,
        sync_status -> Text,
        last_error -> Nullable<Text>,
        skipped_currencies -> Text,
    }
}

diesel::table! {
    processor_customers (org_id, processor_customer_id) {
        org_id -> Text,
        processor_customer_id -> Text,
        name -> Nullable<Text>,
        email -> Nullable<Text>,
        metadata -> Text,
        updated_at -> BigInt,
    }
}

diesel::table! {
    revenue_items (org_id, object_id) {
        org_id -> Text,
        object_id -> Text,
        kind -> Text,
        processor_customer_id -> Text,
        period -> Text,
        amount_microdollars -> BigInt,
        gross_cents -> BigInt,
        net_cents -> BigInt,
        occurred_at -> BigInt,
    }
}

diesel::table! {
    customer_mappings (id) {
        id -> Text,
        org_id -> Text,
        processor_customer_id -> Text,
        tag_key -> Text,
        tag_value -> Text,
        match_type -> Text,
        confidence -> Nullable<Double>,
        created_at -> BigInt,
    }
}

diesel::table! {
    margin_tiers (org_id, processor_customer_id, tag_key, period) {
        org_id -> Text,
        processor_customer_id -> Text,
        tag_key -> Text,
        period -> Text,
        tier -> Text,
        margin -> Nullable<Double>,
        updated_at -> BigInt,
    }
}

diesel::table! {
    sync_leases (name) {
        name -> Text,
        holder -> Text,
        expires_at -> BigInt,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Text,
        org_id -> Text,
        url -> Text,
        description -> Nullable<Text>,
        event_types -> Text,
        enabled -> Bool,
        api_version -> Text,
        payload_mode -> Text,
        signing_secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_expires_at -> Nullable<BigInt>,
        secret_rotated_at -> Nullable<BigInt>,
        failing_since -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Text,
        endpoint_id -> Text,
        outbox_id -> Text,
        event_type -> Text,
        status -> Text,
        attempts -> BigInt,
        next_attempt_at -> BigInt,
        last_attempt_at -> Nullable<BigInt>,
        response_status -> Nullable<BigInt>,
        last_error -> Nullable<Text>,
        created_at -> BigInt,
    }
}

diesel::table! {
    webhook_leases (endpoint_id) {
        endpoint_id -> Text,
        owner_instance -> Text,
        expires_at -> BigInt,
    }
}

diesel::table! {
    actions (id) {
        id -> Text,
        org_id -> Text,
        api_key_id -> Nullable<Text>,
        agent_id -> Text,
        action_type -> Text,
        status -> Text,
        payload -> Text,
        metadata -> Nullable<Text>,
        result -> Nullable<Text>,
        error_message -> Nullable<Text>,
        environment -> Nullable<Text>,
        source_framework -> Nullable<Text>,
        approved_by -> Nullable<Text>,
        rejected_by -> Nullable<Text>,
        created_at -> BigInt,
        approved_at -> Nullable<BigInt>,
        rejected_at -> Nullable<BigInt>,
        executed_at -> Nullable<BigInt>,
        expires_at -> Nullable<BigInt>,
        expired_at -> Nullable<BigInt>,
        updated_at -> BigInt,
        version -> BigInt,
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
    budgets,
    budget_reservations,
    budget_leases,
    budget_changes,
    key_changes,
    provider_credentials,
    provider_credential_changes,
    mcp_servers,
    mcp_server_changes,
    model_prices,
    model_price_changes,
    cost_events,
    cost_event_tags,
    cost_event_bodies,
    cost_rollups,
    rollup_backfill,
    fold_marks,
    trace_spans,
    event_outbox,
    idempotency_keys,
    instances,
    tool_costs,
    customer_bindings,
    webhook_endpoints,
    webhook_deliveries,
    webhook_leases,
    processor_connections,
    processor_customers,
    revenue_items,
    customer_mappings,
    margin_tiers,
    sync_leases,
    actions,
);
