//! Organizations: create, read, update, delete; members, roles, invitations, leave,
//! ownership transfer, usage; and the audit log those changes write.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{read, Client, Resp, TestApp};

const OWNER_ORG: &str = "owner@example.com's organization";

/// The signed-in user's id and current organization id, from the session.
async fn whoami(c: &Client) -> (String, String) {
    let r = c.get("/api/auth/session").await;
    assert_eq!(r.status, 200, "{r:?}");
    let user = r.body["data"]["user"]["id"].as_str().unwrap().to_owned();
    let org = r.body["data"]["org"]["id"].as_str().unwrap().to_owned();
    (user, org)
}

/// Every audit event of the current organization with `action`, newest first.
async fn audit(c: &Client, action: &str) -> Vec<Value> {
    let r = c.get(&format!("/api/audit-log?action={action}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["cursor"], Value::Null, "{r:?}");
    r.body["data"].as_array().unwrap().clone()
}

fn assert_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.code(), code, "{r:?}");
}

fn member_role(members: &Resp, user_id: &str) -> Option<String> {
    members.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["userId"] == user_id)
        .map(|m| m["role"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn create_list_and_get_organizations() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, first_org) = whoami(&owner).await;

    let r = owner.get("/api/orgs").await;
    assert_eq!(r.status, 200, "{r:?}");
    let list = r.body["data"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], first_org.as_str());
    assert_eq!(list[0]["name"], OWNER_ORG);
    assert_eq!(list[0]["role"], "owner");

    let r = owner.post("/api/orgs", json!({ "name": "  Second  " })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let org = &r.body["data"];
    let second = org["id"].as_str().unwrap().to_owned();
    assert!(second.starts_with("svc_org_"), "{r:?}");
    assert_eq!(org["name"], "Second");
    assert_eq!(org["plan"], "free");
    assert_eq!(org["role"], "owner");
    assert_eq!(org["memberCount"], 1);
    assert_eq!(org["upgradeUrl"], Value::Null);
    assert_eq!(org["customerUpgradeUrl"], Value::Null);
    assert!(org["createdAt"].as_str().unwrap().ends_with('Z'));

    let r = owner.get("/api/orgs").await;
    let names: Vec<&str> =
        r.body["data"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, [OWNER_ORG, "Second"]);

    let r = owner.get(&format!("/api/orgs/{second}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["name"], "Second");
    assert_eq!(r.body["data"]["memberCount"], 1);
    assert_eq!(r.body["data"]["updatedAt"], r.body["data"]["createdAt"]);

    // The creation is in the new organization's audit log, not the current one's.
    assert!(audit(&owner, "org.created").await.is_empty());
    assert_eq!(owner.post("/api/auth/switch-org", json!({ "orgId": second })).await.status, 200);
    let events = audit(&owner, "org.created").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["actorId"], owner_id.as_str());
    assert_eq!(events[0]["resourceType"], "organization");
    assert_eq!(events[0]["resourceId"], second.as_str());
    assert_eq!(events[0]["metadata"], json!({ "name": "Second" }));

    for name in [json!(""), json!("   "), json!("x".repeat(101)), json!(7)] {
        let r = owner.post("/api/orgs", json!({ "name": name })).await;
        assert_error(&r, 400, "validation_error");
    }
    assert_error(&owner.post("/api/orgs", json!({})).await, 400, "validation_error");
    assert_eq!(owner.post("/api/orgs", json!({ "name": "x".repeat(100) })).await.status, 201);

    // Path ids must be organization ids; unknown ones are 404.
    assert_error(&owner.get("/api/orgs/nope").await, 400, "validation_error");
    let unknown = format!("svc_org_{}", uuid::Uuid::new_v4());
    assert_error(&owner.get(&format!("/api/orgs/{unknown}")).await, 404, "not_found");

    let anonymous = app.control();
    assert_error(&anonymous.get("/api/orgs").await, 401, "authentication_required");
    assert_error(&anonymous.post("/api/orgs", json!({ "name": "x" })).await, 401, "authentication_required");
    assert_error(&anonymous.get(&format!("/api/orgs/{second}")).await, 401, "authentication_required");
}

#[tokio::test]
async fn update_sets_urls_and_audits_only_real_changes() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, org) = whoami(&owner).await;
    let path = format!("/api/orgs/{org}");

    let r = owner.patch(&path, json!({})).await;
    assert_error(&r, 400, "validation_error");
    assert_eq!(r.body["error"]["details"]["issues"][0]["path"], json!([]));
    for body in [
        json!({ "upgradeUrl": "ftp://example.com/up" }),
        json!({ "upgradeUrl": "not a url" }),
        json!({ "upgradeUrl": "" }),
        json!({ "customerUpgradeUrl": "javascript:alert(1)" }),
        json!({ "customerUpgradeUrl": format!("https://e.com/{}", "a".repeat(2048)) }),
        json!({ "name": "" }),
        json!({ "name": "x".repeat(101) }),
    ] {
        assert_error(&owner.patch(&path, body).await, 400, "validation_error");
    }
    // Every problem is reported at once.
    let r = owner.patch(&path, json!({ "name": "", "upgradeUrl": "x", "customerUpgradeUrl": "y" })).await;
    assert_eq!(r.body["error"]["details"]["issues"].as_array().unwrap().len(), 3, "{r:?}");

    let r = owner
        .patch(&path, json!({ "name": " Renamed ", "upgradeUrl": "https://billing.example.com/upgrade" }))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["name"], "Renamed");
    assert_eq!(r.body["data"]["upgradeUrl"], "https://billing.example.com/upgrade");
    assert_eq!(r.body["data"]["customerUpgradeUrl"], Value::Null);
    assert_eq!(r.body["data"]["memberCount"], 1);
    let r = owner.get(&path).await;
    assert_eq!(r.body["data"]["name"], "Renamed");
    assert_eq!(r.body["data"]["upgradeUrl"], "https://billing.example.com/upgrade");

    let events = audit(&owner, "org_upgrade_url.updated").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["actorId"], owner_id.as_str());
    assert_eq!(events[0]["resourceId"], org.as_str());
    assert_eq!(events[0]["metadata"]["upgradeUrl"], "https://billing.example.com/upgrade");
    assert_eq!(events[0]["metadata"]["previous"], Value::Null);
    // The customer URL did not change (absent), and re-sending the same upgrade URL
    // or clearing an already empty customer URL changes nothing either.
    assert!(audit(&owner, "customer_upgrade_url.updated").await.is_empty());
    let same = json!({ "upgradeUrl": "https://billing.example.com/upgrade", "customerUpgradeUrl": null });
    assert_eq!(owner.patch(&path, same).await.status, 200);
    assert_eq!(audit(&owner, "org_upgrade_url.updated").await.len(), 1);
    assert!(audit(&owner, "customer_upgrade_url.updated").await.is_empty());

    let r = owner.patch(&path, json!({ "customerUpgradeUrl": "http://shop.example.com/plans?x=1" })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["customerUpgradeUrl"], "http://shop.example.com/plans?x=1");
    let r = owner.patch(&path, json!({ "upgradeUrl": null, "customerUpgradeUrl": null })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["upgradeUrl"], Value::Null);
    assert_eq!(r.body["data"]["customerUpgradeUrl"], Value::Null);
    let customer = audit(&owner, "customer_upgrade_url.updated").await;
    assert_eq!(customer.len(), 2, "{customer:?}");
    assert_eq!(customer[0]["metadata"]["customerUpgradeUrl"], Value::Null);
    assert_eq!(customer[0]["metadata"]["previous"], "http://shop.example.com/plans?x=1");
    assert_eq!(audit(&owner, "org_upgrade_url.updated").await.len(), 2);
}

#[tokio::test]
async fn role_minimums_and_non_members() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, org) = whoami(&owner).await;
    let viewer = app.user_in_org("viewer@example.com", OWNER_ORG, "viewer").await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;
    let outsider = app.user_in_org("outsider@example.com", "Elsewhere", "owner").await;
    let (member_id, _) = whoami(&member).await;
    let org_path = format!("/api/orgs/{org}");
    let members = format!("{org_path}/members");
    let invitations = format!("{org_path}/invitations");

    // Everybody sees the organization in their own list.
    for c in [&viewer, &member, &admin] {
        let r = c.get("/api/orgs").await;
        assert_eq!(r.body["data"][0]["id"], org.as_str(), "{r:?}");
    }

    // Viewer: below member, so no organization detail or member list.
    assert_error(&viewer.get(&org_path).await, 403, "forbidden");
    assert_error(&viewer.get(&members).await, 403, "forbidden");
    assert_eq!(viewer.get("/api/orgs/me/usage").await.status, 200);
    assert_error(&viewer.get("/api/audit-log").await, 403, "forbidden");

    // Member: reads, but no admin writes.
    assert_eq!(member.get(&org_path).await.body["data"]["role"], "member");
    assert_eq!(member.get(&members).await.status, 200);
    assert_error(&member.patch(&org_path, json!({ "name": "x" })).await, 403, "forbidden");
    assert_error(&member.get(&invitations).await, 403, "forbidden");
    assert_error(&member.post(&invitations, json!({ "email": "a@b.co" })).await, 403, "forbidden");
    let r = member.patch(&format!("{members}/{member_id}"), json!({ "role": "viewer" })).await;
    assert_error(&r, 403, "forbidden");
    assert_error(&member.delete(&format!("{members}/{member_id}")).await, 403, "forbidden");
    assert_error(&member.get("/api/audit-log").await, 403, "forbidden");

    // Admin: admin writes, but not the owner's.
    assert_eq!(admin.patch(&org_path, json!({ "name": "By admin" })).await.status, 200);
    assert_eq!(admin.get(&invitations).await.status, 200);
    assert_eq!(admin.get("/api/audit-log").await.status, 200);
    assert_error(&admin.delete(&org_path).await, 403, "forbidden");
    let r = admin.post(&format!("{org_path}/transfer"), json!({ "userId": member_id })).await;
    assert_error(&r, 403, "forbidden");

    // A non-member cannot tell the organization exists.
    assert_error(&outsider.get(&org_path).await, 404, "not_found");
    assert_error(&outsider.get(&members).await, 404, "not_found");
    assert_error(&outsider.patch(&org_path, json!({ "name": "mine" })).await, 404, "not_found");
    assert_error(&outsider.delete(&org_path).await, 404, "not_found");
    assert_error(&outsider.get(&invitations).await, 404, "not_found");
    assert_error(&outsider.post(&format!("{org_path}/leave"), json!({})).await, 404, "not_found");
    let r = outsider.patch(&format!("{members}/{member_id}"), json!({ "role": "viewer" })).await;
    assert_error(&r, 404, "not_found");
    let r = outsider.post(&format!("{org_path}/transfer"), json!({ "userId": member_id })).await;
    assert_error(&r, 404, "not_found");
    // Nothing the outsider tried changed the organization.
    assert_eq!(owner.get(&org_path).await.body["data"]["name"], "By admin");

    let anonymous = app.control();
    assert_error(&anonymous.get("/api/audit-log").await, 401, "authentication_required");
    assert_error(&anonymous.get("/api/orgs/me/usage").await, 401, "authentication_required");
    assert_error(
        &anonymous.post("/api/invite/accept", json!({ "token": "x" })).await,
        401,
        "authentication_required",
    );
}

#[tokio::test]
async fn member_roles_change_within_the_rules() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, org) = whoami(&owner).await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;
    let admin2 = app.user_in_org("admin2@example.com", OWNER_ORG, "admin").await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let (admin_id, _) = whoami(&admin).await;
    let (admin2_id, _) = whoami(&admin2).await;
    let (member_id, _) = whoami(&member).await;
    let members = format!("/api/orgs/{org}/members");

    let r = owner.get(&members).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"].as_array().unwrap().len(), 4);
    assert_eq!(r.body["cursor"], Value::Null);
    let m = r.body["data"].as_array().unwrap().iter().find(|m| m["userId"] == member_id.as_str()).unwrap();
    assert_eq!(m["email"], "member@example.com");
    assert_eq!(m["role"], "member");
    assert!(m["joinedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(member_role(&r, &owner_id).as_deref(), Some("owner"));

    // An admin demotes a member.
    let r = admin.patch(&format!("{members}/{member_id}"), json!({ "role": "viewer" })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["role"], "viewer");
    assert_eq!(r.body["data"]["userId"], member_id.as_str());
    let r = member.get(&format!("/api/orgs/{org}")).await;
    assert_error(&r, 403, "forbidden");
    let events = audit(&owner, "member.role_changed").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["actorId"], admin_id.as_str());
    assert_eq!(events[0]["resourceId"], member_id.as_str());
    assert_eq!(events[0]["metadata"]["newRole"], "viewer");
    assert_eq!(events[0]["metadata"]["previousRole"], "member");
    // Setting the role it already has is a no-op and writes nothing.
    let r = admin.patch(&format!("{members}/{member_id}"), json!({ "role": "viewer" })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(audit(&owner, "member.role_changed").await.len(), 1);

    // Nobody grants or takes the owner role here.
    for role in ["owner", "boss", ""] {
        let r = owner.patch(&format!("{members}/{member_id}"), json!({ "role": role })).await;
        assert_error(&r, 400, "validation_error");
        assert_eq!(r.body["error"]["details"]["issues"][0]["path"], json!(["role"]));
    }
    assert_error(&owner.patch(&format!("{members}/{member_id}"), json!({})).await, 400, "validation_error");
    let r = admin.patch(&format!("{members}/{owner_id}"), json!({ "role": "member" })).await;
    assert_error(&r, 403, "forbidden");
    let r = owner.patch(&format!("{members}/{owner_id}"), json!({ "role": "admin" })).await;
    assert_error(&r, 403, "forbidden");

    // Admins are out of reach of other admins; the owner manages them.
    let r = admin.patch(&format!("{members}/{admin2_id}"), json!({ "role": "member" })).await;
    assert_error(&r, 403, "forbidden");
    let r = owner.patch(&format!("{members}/{admin2_id}"), json!({ "role": "member" })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["role"], "member");
    // An admin may promote to admin.
    let r = admin.patch(&format!("{members}/{admin2_id}"), json!({ "role": "admin" })).await;
    assert_eq!(r.status, 200, "{r:?}");

    // Unknown and malformed targets.
    let ghost = format!("svc_usr_{}", uuid::Uuid::new_v4());
    assert_error(
        &owner.patch(&format!("{members}/{ghost}"), json!({ "role": "member" })).await,
        404,
        "not_found",
    );
    assert_error(
        &owner.patch(&format!("{members}/nope"), json!({ "role": "member" })).await,
        400,
        "validation_error",
    );
    assert_error(&owner.delete(&format!("{members}/{ghost}")).await, 404, "not_found");
    // A bare UUID is accepted as well as the prefixed id.
    let bare = admin2_id.trim_start_matches("svc_usr_");
    let r = owner.patch(&format!("{members}/{bare}"), json!({ "role": "admin" })).await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn members_are_removed_within_the_rules() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, org) = whoami(&owner).await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;
    let admin2 = app.user_in_org("admin2@example.com", OWNER_ORG, "admin").await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let (admin_id, _) = whoami(&admin).await;
    let (admin2_id, _) = whoami(&admin2).await;
    let (member_id, _) = whoami(&member).await;
    let members = format!("/api/orgs/{org}/members");

    assert_error(&admin.delete(&format!("{members}/{owner_id}")).await, 403, "forbidden");
    assert_error(&owner.delete(&format!("{members}/{owner_id}")).await, 403, "forbidden");
    assert_error(&admin.delete(&format!("{members}/{admin2_id}")).await, 403, "forbidden");

    let r = admin.delete(&format!("{members}/{member_id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"], json!({ "userId": member_id, "removed": true }));
    // The removed user's session no longer reaches the organization.
    assert_eq!(member.get("/api/orgs").await.body["data"], json!([]));
    assert_error(&member.get("/api/orgs/me/usage").await, 403, "forbidden");
    assert_error(&member.get(&format!("/api/orgs/{org}")).await, 404, "not_found");
    assert_error(&admin.delete(&format!("{members}/{member_id}")).await, 404, "not_found");

    let r = owner.delete(&format!("{members}/{admin2_id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = owner.get(&members).await;
    assert_eq!(member_role(&r, &member_id), None);
    assert_eq!(member_role(&r, &admin2_id), None);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);

    let events = audit(&owner, "member.removed").await;
    assert_eq!(events.len(), 2, "{events:?}");
    let by: HashSet<(String, String)> = events
        .iter()
        .map(|e| (e["actorId"].as_str().unwrap().to_owned(), e["resourceId"].as_str().unwrap().to_owned()))
        .collect();
    assert!(by.contains(&(admin_id.clone(), member_id.clone())), "{events:?}");
    assert!(by.contains(&(owner_id.clone(), admin2_id.clone())), "{events:?}");
    assert_eq!(
        events.iter().find(|e| e["resourceId"] == member_id.as_str()).unwrap()["metadata"]["role"],
        "member"
    );
}

#[tokio::test]
async fn invitation_flow_end_to_end() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, org) = whoami(&owner).await;
    let invitations = format!("/api/orgs/{org}/invitations");

    let r = owner.post(&invitations, json!({ "email": " New@Example.com ", "role": "admin" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let inv = r.body["data"].clone();
    let token = inv["token"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 64, "{inv}");
    assert!(uuid::Uuid::parse_str(inv["id"].as_str().unwrap()).is_ok(), "{inv}");
    assert_eq!(inv["email"], "new@example.com");
    assert_eq!(inv["role"], "admin");
    assert_eq!(inv["status"], "pending");
    assert_eq!(inv["invitedBy"], owner_id.as_str());
    let created = chrono::DateTime::parse_from_rfc3339(inv["createdAt"].as_str().unwrap()).unwrap();
    let expires = chrono::DateTime::parse_from_rfc3339(inv["expiresAt"].as_str().unwrap()).unwrap();
    assert_eq!((expires - created).num_days(), 7);

    // Role defaults to member.
    let r = owner.post(&invitations, json!({ "email": "plain@example.com" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["data"]["role"], "member");

    // Re-inviting a pending email, or inviting a member, is a conflict.
    let r = owner.post(&invitations, json!({ "email": "NEW@example.com", "role": "viewer" })).await;
    assert_error(&r, 409, "conflict");
    let r = owner.post(&invitations, json!({ "email": "Owner@Example.com" })).await;
    assert_error(&r, 409, "conflict");
    for body in [
        json!({ "email": "not-an-email" }),
        json!({ "email": "a@b" }),
        json!({ "email": "x@example.com", "role": "owner" }),
        json!({ "email": "x@example.com", "role": "root" }),
        json!({}),
    ] {
        assert_error(&owner.post(&invitations, body).await, 400, "validation_error");
    }
    let r = owner.post(&invitations, json!({ "email": "nope", "role": "owner" })).await;
    assert_eq!(r.body["error"]["details"]["issues"].as_array().unwrap().len(), 2, "{r:?}");

    // The list shows pending invitations and never a token.
    let r = owner.get(&invitations).await;
    assert_eq!(r.status, 200, "{r:?}");
    let listed = r.body["data"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|i| i.get("token").is_none() && i["status"] == "pending"), "{r:?}");
    assert_eq!(r.body["cursor"], Value::Null);
    let r = owner.get(&format!("{invitations}?limit=1")).await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    let cursor = r.body["cursor"].to_string();
    let next = owner.get(&format!("{invitations}?limit=1&cursor={}", urlencode(&cursor))).await;
    assert_eq!(next.status, 200, "{next:?}");
    assert_eq!(next.body["data"].as_array().unwrap().len(), 1);
    assert_ne!(next.body["data"][0]["id"], r.body["data"][0]["id"]);
    assert_eq!(next.body["cursor"], Value::Null);

    // Someone with another email cannot use the token.
    let wrong = app.user_in_org("wrong@example.com", "Wrong Org", "owner").await;
    let r = wrong.post("/api/invite/accept", json!({ "token": token })).await;
    assert_error(&r, 403, "forbidden");

    // The invitee (created in another organization) accepts and lands in this one.
    let invitee = app.user_in_org("new@example.com", "Invitee Org", "owner").await;
    let (invitee_id, home) = whoami(&invitee).await;
    assert_ne!(home, org);
    let r = invitee.post("/api/invite/accept", json!({ "token": token })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["orgId"], org.as_str());
    assert_eq!(r.body["data"]["orgName"], OWNER_ORG);
    assert_eq!(r.body["data"]["role"], "admin");
    let r = invitee.get("/api/auth/session").await;
    assert_eq!(r.body["data"]["org"]["id"], org.as_str(), "{r:?}");
    assert_eq!(r.body["data"]["role"], "admin");
    assert_eq!(invitee.get("/api/orgs").await.body["data"].as_array().unwrap().len(), 2);
    let r = owner.get(&format!("/api/orgs/{org}/members")).await;
    assert_eq!(member_role(&r, &invitee_id).as_deref(), Some("admin"));
    // The invitee, now an admin here, reads this organization's audit log.
    assert_eq!(invitee.get("/api/audit-log").await.status, 200);

    // A used token is gone; so is an unknown one.
    assert_error(&invitee.post("/api/invite/accept", json!({ "token": token })).await, 404, "not_found");
    assert_error(
        &invitee.post("/api/invite/accept", json!({ "token": "f".repeat(64) })).await,
        404,
        "not_found",
    );
    assert_error(&invitee.post("/api/invite/accept", json!({ "token": " " })).await, 400, "validation_error");
    assert_error(&invitee.post("/api/invite/accept", json!({})).await, 400, "validation_error");
    // Accepted invitations leave the pending list.
    assert_eq!(owner.get(&invitations).await.body["data"].as_array().unwrap().len(), 1);

    let created = audit(&owner, "invitation.created").await;
    assert_eq!(created.len(), 2);
    let first = created.iter().find(|e| e["metadata"]["email"] == "new@example.com").unwrap();
    assert_eq!(first["metadata"], json!({ "email": "new@example.com", "role": "admin" }));
    assert_eq!(first["actorId"], owner_id.as_str());
    assert_eq!(first["resourceType"], "invitation");
    assert_eq!(first["resourceId"], inv["id"]);
    let accepted = audit(&owner, "invitation.accepted").await;
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0]["actorId"], invitee_id.as_str());
    assert_eq!(accepted[0]["resourceId"], inv["id"]);
}

#[tokio::test]
async fn invitations_are_revoked() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, org) = whoami(&owner).await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;
    let (admin_id, _) = whoami(&admin).await;
    let invitations = format!("/api/orgs/{org}/invitations");

    let r = owner.post(&invitations, json!({ "email": "revoke@example.com", "role": "viewer" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["data"]["id"].as_str().unwrap().to_owned();
    let token = r.body["data"]["token"].as_str().unwrap().to_owned();

    assert_error(&admin.delete(&format!("{invitations}/not-a-uuid")).await, 400, "validation_error");
    let unknown = uuid::Uuid::new_v4();
    assert_error(&admin.delete(&format!("{invitations}/{unknown}")).await, 404, "not_found");
    let r = admin.delete(&format!("{invitations}/{id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"]["status"], "revoked");
    assert_eq!(r.body["data"]["id"], id.as_str());
    assert_error(&admin.delete(&format!("{invitations}/{id}")).await, 404, "not_found");
    assert_eq!(owner.get(&invitations).await.body["data"], json!([]));

    // The revoked token no longer works, even for the right email.
    let invitee = app.user_in_org("revoke@example.com", "Invitee Org", "owner").await;
    assert_error(&invitee.post("/api/invite/accept", json!({ "token": token })).await, 404, "not_found");

    // Revoking frees the email for a new invitation.
    let r = owner.post(&invitations, json!({ "email": "revoke@example.com" })).await;
    assert_eq!(r.status, 201, "{r:?}");

    // Another organization's admin cannot revoke this organization's invitations.
    let new_id = r.body["data"]["id"].as_str().unwrap().to_owned();
    let (_, invitee_org) = whoami(&invitee).await;
    let r = invitee.delete(&format!("/api/orgs/{invitee_org}/invitations/{new_id}")).await;
    assert_error(&r, 404, "not_found");

    let revoked = audit(&owner, "invitation.revoked").await;
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["actorId"], admin_id.as_str());
    assert_eq!(revoked[0]["resourceId"], id.as_str());
    assert_eq!(revoked[0]["metadata"]["email"], "revoke@example.com");
    assert_ne!(revoked[0]["actorId"], owner_id.as_str());
}

#[tokio::test]
async fn accepting_while_already_a_member_is_a_conflict() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, org) = whoami(&owner).await;
    let r = owner.post(&format!("/api/orgs/{org}/invitations"), json!({ "email": "late@example.com" })).await;
    let token = r.body["data"]["token"].as_str().unwrap().to_owned();
    // The operator adds the same person directly before they accept.
    let late = app.user_in_org("late@example.com", OWNER_ORG, "viewer").await;
    let r = late.post("/api/invite/accept", json!({ "token": token })).await;
    assert_error(&r, 409, "conflict");
}

#[tokio::test]
async fn expired_invitations_are_refused_and_can_be_reissued() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, org) = whoami(&owner).await;
    let invitations = format!("/api/orgs/{org}/invitations");
    let r = owner.post(&invitations, json!({ "email": "slow@example.com" })).await;
    let token = r.body["data"]["token"].as_str().unwrap().to_owned();
    expire_all_invitations(&app).await;

    assert_eq!(owner.get(&invitations).await.body["data"], json!([]));
    let slow = app.user_in_org("slow@example.com", "Slow Org", "owner").await;
    assert_error(&slow.post("/api/invite/accept", json!({ "token": token })).await, 403, "forbidden");
    // An expired invitation no longer blocks a new one, which works.
    let r = owner.post(&invitations, json!({ "email": "slow@example.com" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let fresh = r.body["data"]["token"].as_str().unwrap().to_owned();
    assert_eq!(slow.post("/api/invite/accept", json!({ "token": fresh })).await.status, 200);
}

#[tokio::test]
async fn ownership_transfers_to_a_member() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (owner_id, org) = whoami(&owner).await;
    let member = app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    let outsider = app.user_in_org("outsider@example.com", "Elsewhere", "owner").await;
    let (member_id, _) = whoami(&member).await;
    let (outsider_id, _) = whoami(&outsider).await;
    let transfer = format!("/api/orgs/{org}/transfer");

    assert_error(&owner.post(&transfer, json!({ "userId": outsider_id })).await, 404, "not_found");
    assert_error(&owner.post(&transfer, json!({ "userId": owner_id })).await, 400, "validation_error");
    assert_error(&owner.post(&transfer, json!({ "userId": "nope" })).await, 400, "validation_error");
    assert_error(&owner.post(&transfer, json!({})).await, 400, "validation_error");
    assert_error(&member.post(&transfer, json!({ "userId": member_id })).await, 403, "forbidden");

    let r = owner.post(&transfer, json!({ "userId": member_id })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body["data"],
        json!({ "orgId": org, "newOwnerUserId": member_id, "previousOwnerUserId": owner_id })
    );
    let r = owner.get(&format!("/api/orgs/{org}/members")).await;
    assert_eq!(member_role(&r, &member_id).as_deref(), Some("owner"));
    assert_eq!(member_role(&r, &owner_id).as_deref(), Some("admin"));

    // The previous owner is an admin now: no owner-only actions.
    assert_error(&owner.delete(&format!("/api/orgs/{org}")).await, 403, "forbidden");
    assert_error(&owner.post(&transfer, json!({ "userId": owner_id })).await, 403, "forbidden");
    // The new owner must transfer before leaving; the previous owner may leave.
    assert_error(&member.post_empty(&format!("/api/orgs/{org}/leave")).await, 409, "conflict");

    let events = audit(&member, "org.ownership_transferred").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["actorId"], owner_id.as_str());
    assert_eq!(events[0]["resourceId"], org.as_str());
    assert_eq!(events[0]["metadata"]["newOwnerUserId"], member_id.as_str());

    // And back again, by the new owner.
    let r = member.post(&transfer, json!({ "userId": owner_id })).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(audit(&owner, "org.ownership_transferred").await.len(), 2);
}

#[tokio::test]
async fn members_leave_but_the_owner_cannot() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, org) = whoami(&owner).await;
    let viewer = app.user_in_org("viewer@example.com", OWNER_ORG, "viewer").await;
    let admin = app.user_in_org("admin@example.com", OWNER_ORG, "admin").await;
    let (viewer_id, _) = whoami(&viewer).await;
    let (admin_id, _) = whoami(&admin).await;
    let leave = format!("/api/orgs/{org}/leave");

    let r = owner.post_empty(&leave).await;
    assert_error(&r, 409, "conflict");

    // Viewers may leave too (see the handler's comment).
    let r = viewer.post_empty(&leave).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"], json!({ "orgId": org, "left": true }));
    assert_eq!(viewer.get("/api/orgs").await.body["data"], json!([]));
    assert_error(&viewer.post_empty(&leave).await, 404, "not_found");

    assert_eq!(admin.post_empty(&leave).await.status, 200);
    let r = owner.get(&format!("/api/orgs/{org}/members")).await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1, "{r:?}");

    let events = audit(&owner, "member.left").await;
    assert_eq!(events.len(), 2);
    let actors: HashSet<&str> = events.iter().map(|e| e["actorId"].as_str().unwrap()).collect();
    assert_eq!(actors, HashSet::from([viewer_id.as_str(), admin_id.as_str()]));
    let viewer_event = events.iter().find(|e| e["actorId"] == viewer_id.as_str()).unwrap();
    assert_eq!(viewer_event["resourceId"], viewer_id.as_str());
    assert_eq!(viewer_event["metadata"]["role"], "viewer");
}

#[tokio::test]
async fn deleting_an_organization_takes_its_members_invitations_and_keys() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, home) = whoami(&owner).await;
    let r = owner.post("/api/orgs", json!({ "name": "Doomed" })).await;
    let doomed = r.body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(owner.post("/api/auth/switch-org", json!({ "orgId": doomed })).await.status, 200);

    // A member joins through an invitation (their session now points at Doomed),
    // another invitation stays pending, and the organization has an API key.
    let invitations = format!("/api/orgs/{doomed}/invitations");
    let r = owner.post(&invitations, json!({ "email": "joiner@example.com" })).await;
    let token = r.body["data"]["token"].as_str().unwrap().to_owned();
    let r = owner.post(&invitations, json!({ "email": "pending@example.com" })).await;
    let pending_token = r.body["data"]["token"].as_str().unwrap().to_owned();
    let joiner = app.user_in_org("joiner@example.com", "Joiner Org", "owner").await;
    assert_eq!(joiner.post("/api/invite/accept", json!({ "token": token })).await.status, 200);
    let r = owner.post("/api/keys", json!({ "name": "doomed key" })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let raw_key = r.body["data"]["rawKey"].as_str().unwrap().to_owned();
    assert_eq!(introspect(&owner, &raw_key).await.status, 200);

    assert_error(&joiner.delete(&format!("/api/orgs/{doomed}")).await, 403, "forbidden");

    let r = owner.delete(&format!("/api/orgs/{doomed}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["data"], json!({ "id": doomed, "deleted": true }));

    assert_error(&owner.get(&format!("/api/orgs/{doomed}")).await, 404, "not_found");
    assert_error(&owner.delete(&format!("/api/orgs/{doomed}")).await, 404, "not_found");
    let names: Vec<Value> = owner.get("/api/orgs").await.body["data"].as_array().unwrap().clone();
    assert_eq!(names.len(), 1);
    assert_eq!(names[0]["id"], home.as_str());
    // Sessions that pointed at it fall back to another organization.
    let r = owner.get("/api/auth/session").await;
    assert_eq!(r.body["data"]["org"]["id"], home.as_str(), "{r:?}");
    let r = joiner.get("/api/auth/session").await;
    assert_eq!(r.body["data"]["org"]["name"], "Joiner Org", "{r:?}");
    // The key is revoked at once, and the pending invitation is gone.
    let r = introspect(&owner, &raw_key).await;
    assert_error(&r, 401, "authentication_required");
    let pending = app.user_in_org("pending@example.com", "Pending Org", "owner").await;
    assert_error(
        &pending.post("/api/invite/accept", json!({ "token": pending_token })).await,
        404,
        "not_found",
    );

    // The home organization's log does not carry the deleted organization's events.
    let events = audit(&owner, "org.deleted").await;
    assert!(events.is_empty(), "{events:?}");
}

#[tokio::test]
async fn usage_counts_the_current_organization() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let r = owner.get("/api/orgs/me/usage").await;
    assert_eq!(r.status, 200, "{r:?}");
    let data = &r.body["data"];
    assert_eq!(data["plan"], "free");
    assert_eq!(data["limits"]["apiKeys"], 10);
    assert_eq!(data["limits"]["webhookEndpoints"], 2);
    assert_eq!(
        data["usage"],
        json!({ "apiKeys": 0, "members": 1, "budgets": 0, "webhookEndpoints": 0, "governedRequests": 0 })
    );
    let period = data["periodStart"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(period).is_ok(), "{period}");

    app.user_in_org("member@example.com", OWNER_ORG, "member").await;
    app.user_in_org("viewer@example.com", OWNER_ORG, "viewer").await;
    for name in ["one", "two"] {
        assert_eq!(owner.post("/api/keys", json!({ "name": name })).await.status, 201);
    }
    let r = owner.get("/api/keys").await;
    let revoke = r.body["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(owner.delete(&format!("/api/keys/{revoke}")).await.status, 200);
    let r = owner.get("/api/orgs/me/usage").await;
    assert_eq!(r.body["data"]["usage"]["apiKeys"], 1, "{r:?}");
    assert_eq!(r.body["data"]["usage"]["members"], 3, "{r:?}");

    // Usage follows the session's current organization.
    let r = owner.post("/api/orgs", json!({ "name": "Empty" })).await;
    let empty = r.body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(owner.post("/api/auth/switch-org", json!({ "orgId": empty })).await.status, 200);
    let r = owner.get("/api/orgs/me/usage").await;
    assert_eq!(r.body["data"]["usage"]["apiKeys"], 0, "{r:?}");
    assert_eq!(r.body["data"]["usage"]["members"], 1, "{r:?}");
}

#[tokio::test]
async fn audit_log_filters_pages_and_validates() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (_, org) = whoami(&owner).await;
    let invitations = format!("/api/orgs/{org}/invitations");
    for i in 0..5 {
        let r = owner.post(&invitations, json!({ "email": format!("p{i}@example.com") })).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    // Millisecond timestamps: leave a gap so "newest first" is unambiguous below.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let r = owner.patch(&format!("/api/orgs/{org}"), json!({ "upgradeUrl": "https://up.example.com" })).await;
    assert_eq!(r.status, 200, "{r:?}");

    let r = owner.get("/api/audit-log").await;
    assert_eq!(r.status, 200, "{r:?}");
    let all = r.body["data"].as_array().unwrap().clone();
    assert_eq!(all.len(), 6, "{r:?}");
    assert_eq!(r.body["cursor"], Value::Null);
    // Newest first: the URL change came last.
    assert_eq!(all[0]["action"], "org_upgrade_url.updated");
    for ev in &all {
        assert!(uuid::Uuid::parse_str(ev["id"].as_str().unwrap()).is_ok(), "{ev}");
        assert!(ev["createdAt"].as_str().unwrap().ends_with('Z'));
        assert!(ev["metadata"].is_object());
    }
    let times: Vec<&str> = all.iter().map(|e| e["createdAt"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");

    // Exact action filter.
    assert_eq!(audit(&owner, "invitation.created").await.len(), 5);
    assert!(audit(&owner, "invitation").await.is_empty());

    // Pages of two walk the whole log once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/audit-log?limit=2&cursor={}", urlencode(c)),
            None => "/api/audit-log?limit=2".to_owned(),
        };
        let r = owner.get(&path).await;
        assert_eq!(r.status, 200, "{r:?}");
        pages += 1;
        for ev in r.body["data"].as_array().unwrap() {
            seen.push(ev["id"].as_str().unwrap().to_owned());
        }
        if r.body["cursor"].is_null() {
            break;
        }
        assert!(r.body["cursor"]["createdAt"].is_string() && r.body["cursor"]["id"].is_string(), "{r:?}");
        cursor = Some(r.body["cursor"].to_string());
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = all.iter().map(|e| e["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(seen, expected);

    // Filter and cursor together.
    let r = owner.get("/api/audit-log?action=invitation.created&limit=3").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 3);
    let c = r.body["cursor"].to_string();
    let r = owner
        .get(&format!("/api/audit-log?action=invitation.created&limit=3&cursor={}", urlencode(&c)))
        .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2, "{r:?}");
    assert_eq!(r.body["cursor"], Value::Null);

    for bad in ["limit=0", "limit=101", "limit=x", "cursor=nope", "cursor=%7B%7D"] {
        assert_error(&owner.get(&format!("/api/audit-log?{bad}")).await, 400, "validation_error");
    }
    assert_eq!(owner.get("/api/audit-log?limit=100").await.status, 200);
}

/// Moves every invitation's expiry into the past, straight in the database.
async fn expire_all_invitations(app: &TestApp) {
    let sql = "UPDATE invitations SET expires_at = 0";
    if crate::support::backend_is_postgres() {
        use diesel_async::{AsyncConnection, RunQueryDsl};
        let mut conn = diesel_async::AsyncPgConnection::establish(&app.db.url).await.unwrap();
        diesel::sql_query(sql).execute(&mut conn).await.unwrap();
    } else {
        use diesel::connection::SimpleConnection;
        use diesel::{Connection, RunQueryDsl};
        let path = app.db.url.trim_start_matches("sqlite://");
        let mut conn = diesel::sqlite::SqliteConnection::establish(path).unwrap();
        // The server may be writing at the same moment: wait for its lock.
        conn.batch_execute("PRAGMA busy_timeout = 5000").unwrap();
        diesel::sql_query(sql).execute(&mut conn).unwrap();
    }
}

async fn introspect(c: &Client, raw: &str) -> Resp {
    read(
        c.request(reqwest::Method::GET, "/api/auth/introspect")
            .header("X-Service-Key", raw)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Percent-encodes a query parameter value.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
