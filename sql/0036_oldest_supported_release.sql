-- Which releases of the service may serve this database (issue 55; README "Upgrading").
--
-- A release's post-deployment migrations (sql/post/, applied by `poopypals migrate --post-deployment` once no
-- instance of the previous release serves) may remove or change what that release used. The one that does
-- replaces this function in the same transaction, returning its own release: a release older than the value then
-- answers 503 `release_unsupported` with Retry-After and writes nothing (releases from 1.1.0 ask at start, every
-- 5 s, at /readyz, and after any error a changed schema can cause). Pre-deployment migrations never raise it.
--
-- 1.0.0 (main 373d5db, sql/0001-0035) serves the schema this file leaves: it only adds a function.
CREATE OR REPLACE FUNCTION poopypals_oldest_release() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT '1.0.0'::text $$;

COMMENT ON FUNCTION poopypals_oldest_release() IS
    'The oldest release of the PoopyPals service that may serve this database (semantic version); raised only by post-deployment migrations.';
