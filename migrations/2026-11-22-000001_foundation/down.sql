DROP TABLE audit_events;
DROP TABLE api_keys;
DROP TABLE invitations;
DROP TABLE sessions;
DROP TABLE memberships;
DROP TABLE organizations;
DROP TABLE users;
