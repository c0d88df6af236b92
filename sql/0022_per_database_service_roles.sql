-- Issue 42, item 1: service roles of this database only. poopypals_app and poopypals_profiles were cluster-wide,
-- created by the first database's migration and granted to every migrating login, and the policies keyed on
-- their names: membership gained for one database was membership in every other (0019 took CONNECT from PUBLIC,
-- which closes the door, not the hole). From here on this database has roles of its own,
--     poopypals_app_<tag> and poopypals_profiles_<tag>,
-- <tag> being the database's name when it is short and plain ([a-z0-9_]{1,40}), else 'h' and 16 hex digits of its
-- MD5. They receive every privilege, ownership and policy the shared roles had here, and the shared roles keep
-- nothing here (they may still serve other databases, so they are not dropped). The names are read from
-- poopypals_service_role() and poopypals_profiles_role(), which the service calls in every request's context
-- statement (constant, inlined and folded into the prepared plan) and later migrations use with format(%I).
--
-- One transaction, no table rewritten (ALTER POLICY takes a brief lock on each table). The service before this
-- change switches to the shared role and is refused after it: upgrade the binary with this migration.

DO $$
DECLARE
    tag constant text := CASE WHEN current_database() ~ '^[a-z0-9_]{1,40}$' THEN current_database()
                              ELSE 'h' || left(md5(current_database()), 16) END;
    app constant name := 'poopypals_app_' || tag;
    profiles constant name := 'poopypals_profiles_' || tag;
    login constant name := current_user;
    set_option_exists constant boolean := current_setting('server_version_num')::int >= 160000;
    r record;
    roles text;
    definition text;
BEGIN
    FOR r IN SELECT unnest(ARRAY[app, profiles]) AS role LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r.role) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r.role);
        -- The names are predictable: a role someone made beforehand, which can log in or which others are members
        -- of, would hand them this database. Refused; an administrator looks at it.
        ELSIF EXISTS (SELECT FROM pg_roles WHERE rolname = r.role AND (rolcanlogin OR rolsuper OR rolbypassrls))
              OR EXISTS (SELECT FROM pg_auth_members m WHERE m.roleid = to_regrole(r.role) AND m.member <> to_regrole(login)) THEN
            RAISE EXCEPTION 'role % exists already, with members or rights this migration did not give it', r.role
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'An administrator checks who made it and why; once it is dropped, run the migrations again.';
        END IF;
        -- As 0007: the login may SET ROLE to each, and from PostgreSQL 16 does not inherit their privileges.
        EXECUTE CASE WHEN set_option_exists THEN format('GRANT %I TO %I WITH SET TRUE, INHERIT FALSE', r.role, login)
                     ELSE format('GRANT %I TO %I', r.role, login) END;
    END LOOP;

    -- The SECURITY DEFINER functions change owner. Only a role with the privileges of both owners may do that, and
    -- from PostgreSQL 16 the login has neither's: the shared role does it, made a member of the new one for this
    -- transaction only.
    EXECUTE format('GRANT %I TO poopypals_profiles', profiles);
    EXECUTE format('GRANT CREATE ON SCHEMA public TO %I', profiles);
    PERFORM set_config('role', 'poopypals_profiles', true);
    EXECUTE format('REASSIGN OWNED BY poopypals_profiles TO %I', profiles);
    PERFORM set_config('role', 'none', true);
    EXECUTE format('REVOKE %I FROM poopypals_profiles', profiles);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', profiles);

    -- Every privilege the shared roles hold here, to this database's roles.
    FOR r IN SELECT a.privilege_type AS privilege, n.nspname AS schema, pg_get_userbyid(a.grantee) AS grantee
             FROM pg_namespace n, aclexplode(n.nspacl) a
             WHERE pg_get_userbyid(a.grantee) IN ('poopypals_app', 'poopypals_profiles') LOOP
        EXECUTE format('GRANT %s ON SCHEMA %I TO %I', r.privilege, r.schema,
                       CASE r.grantee WHEN 'poopypals_app' THEN app ELSE profiles END);
    END LOOP;
    FOR r IN SELECT a.privilege_type AS privilege, c.oid::regclass::text AS rel, c.relkind, pg_get_userbyid(a.grantee) AS grantee
             FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.relnamespace = 'public'::regnamespace AND a.grantee <> c.relowner
               AND pg_get_userbyid(a.grantee) IN ('poopypals_app', 'poopypals_profiles') LOOP
        EXECUTE format('GRANT %s ON %s %s TO %I', r.privilege, CASE WHEN r.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, r.rel,
                       CASE r.grantee WHEN 'poopypals_app' THEN app ELSE profiles END);
    END LOOP;
    FOR r IN SELECT a.privilege_type AS privilege, c.oid::regclass::text AS rel, att.attname, pg_get_userbyid(a.grantee) AS grantee
             FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid, aclexplode(att.attacl) a
             WHERE c.relnamespace = 'public'::regnamespace AND NOT att.attisdropped
               AND pg_get_userbyid(a.grantee) IN ('poopypals_app', 'poopypals_profiles') LOOP
        EXECUTE format('GRANT %s (%I) ON TABLE %s TO %I', r.privilege, r.attname, r.rel,
                       CASE r.grantee WHEN 'poopypals_app' THEN app ELSE profiles END);
    END LOOP;
    -- A function's privileges are granted by its owner (from PostgreSQL 16 the login has none of the profile
    -- role's, which by now owns the SECURITY DEFINER functions).
    FOR r IN SELECT p.oid::regprocedure::text AS fn, pg_get_userbyid(a.grantee) AS grantee, pg_get_userbyid(p.proowner) AS owner
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.pronamespace = 'public'::regnamespace AND a.grantee <> p.proowner
               AND pg_get_userbyid(a.grantee) IN ('poopypals_app', 'poopypals_profiles') LOOP
        IF r.owner <> login THEN
            PERFORM set_config('role', r.owner, true);
        END IF;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', r.fn, CASE r.grantee WHEN 'poopypals_app' THEN app ELSE profiles END);
        PERFORM set_config('role', 'none', true);
    END LOOP;

    -- The policies name this database's roles, in their role lists and in their `current_user = …` conditions.
    FOR r IN SELECT pol.polname, pol.polrelid::regclass::text AS rel, pol.polcmd,
                    pg_get_expr(pol.polqual, pol.polrelid) AS qual, pg_get_expr(pol.polwithcheck, pol.polrelid) AS checked,
                    ARRAY(SELECT CASE WHEN x = 0 THEN 'public' ELSE pg_get_userbyid(x)::text END FROM unnest(pol.polroles) AS x) AS names
             FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid
             WHERE c.relnamespace = 'public'::regnamespace LOOP
        SELECT string_agg(CASE name WHEN 'public' THEN 'PUBLIC' WHEN 'poopypals_app' THEN quote_ident(app)
                                    WHEN 'poopypals_profiles' THEN quote_ident(profiles) ELSE quote_ident(name) END, ', ')
        INTO roles FROM unnest(r.names) AS name;
        definition := format('ALTER POLICY %I ON %s TO %s', r.polname, r.rel, roles);
        IF r.qual IS NOT NULL THEN
            definition := definition || ' USING (' || replace(replace(r.qual, '''poopypals_profiles''', quote_literal(profiles)),
                                                              '''poopypals_app''', quote_literal(app)) || ')';
        END IF;
        IF r.checked IS NOT NULL THEN
            definition := definition || ' WITH CHECK (' || replace(replace(r.checked, '''poopypals_profiles''', quote_literal(profiles)),
                                                                   '''poopypals_app''', quote_literal(app)) || ')';
        END IF;
        EXECUTE definition;
    END LOOP;

    -- The shared roles keep nothing here. A function's grant is revoked by its grantor, its owner.
    FOR r IN SELECT DISTINCT p.oid::regprocedure::text AS fn, pg_get_userbyid(p.proowner) AS owner
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.pronamespace = 'public'::regnamespace AND pg_get_userbyid(a.grantee) IN ('poopypals_app', 'poopypals_profiles') LOOP
        IF r.owner <> login THEN
            PERFORM set_config('role', r.owner, true);
        END IF;
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM poopypals_app, poopypals_profiles', r.fn);
        PERFORM set_config('role', 'none', true);
    END LOOP;
    REVOKE ALL ON ALL TABLES IN SCHEMA public FROM poopypals_app, poopypals_profiles;
    REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM poopypals_app, poopypals_profiles;
    REVOKE ALL ON SCHEMA public FROM poopypals_app, poopypals_profiles;

    EXECUTE format($f$CREATE FUNCTION poopypals_service_role() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
                      AS $body$SELECT %L::text$body$ $f$, app);
    EXECUTE format($f$CREATE FUNCTION poopypals_profiles_role() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
                      AS $body$SELECT %L::text$body$ $f$, profiles);
END
$$;

COMMENT ON FUNCTION poopypals_service_role() IS 'The role every request transaction of this database switches to (sql/0022).';
COMMENT ON FUNCTION poopypals_profiles_role() IS 'The NOLOGIN role that owns the profile, rotation and erasure functions here (sql/0022).';
