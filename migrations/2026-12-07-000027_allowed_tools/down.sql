ALTER TABLE api_keys DROP COLUMN allowed_tools;
