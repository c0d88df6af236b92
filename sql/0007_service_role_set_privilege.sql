-- The role that runs the migrations (the service's login) must be able to SET ROLE poopypals_app: every request
-- transaction switches to it. On PostgreSQL 16 and later, membership alone no longer allows that: a CREATEROLE
-- role that creates a role (as 0005 does) gets only an ADMIN membership, with SET and INHERIT false, so
-- pg_has_role(..., 'MEMBER') is true there but SET ROLE fails with 42501. The creator holds ADMIN, so it can
-- grant itself the SET option; INHERIT FALSE keeps the login's own privileges apart from the service role's.
-- On PostgreSQL 15 any membership allows SET ROLE, and the `WITH SET` syntax does not exist: the grant is built
-- with format() so this file parses on both.
DO $$
DECLARE
    set_option_exists constant boolean := current_setting('server_version_num')::int >= 160000;
    -- The privilege SET ROLE needs: 'SET' from PostgreSQL 16, plain membership before.
    needed constant text := CASE WHEN set_option_exists THEN 'SET' ELSE 'MEMBER' END;
    grant_sql constant text := CASE
        WHEN set_option_exists THEN format('GRANT poopypals_app TO %I WITH SET TRUE, INHERIT FALSE', current_user)
        ELSE format('GRANT poopypals_app TO %I', current_user)
    END;
BEGIN
    IF pg_has_role(current_user, 'poopypals_app', needed) THEN
        RETURN;
    END IF;
    BEGIN
        EXECUTE grant_sql;
    EXCEPTION
        -- Another database's migration granted it at the same moment.
        WHEN duplicate_object OR unique_violation THEN NULL;
        -- No ADMIN option on poopypals_app (someone else created it): explained below.
        WHEN insufficient_privilege THEN NULL;
    END;
    IF NOT pg_has_role(current_user, 'poopypals_app', needed) THEN
        RAISE EXCEPTION 'role % cannot SET ROLE poopypals_app, which every request transaction needs', current_user
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Only a superuser or a role with ADMIN OPTION on poopypals_app (on PostgreSQL 15: '
                                  'CREATEROLE) may grant it, and %I is neither. From PostgreSQL 16 a role''s creator '
                                  'gets that option, so this happens when another role created poopypals_app.',
                                  current_user),
                  HINT = format('A superuser, or a role with ADMIN OPTION on poopypals_app, must run: %s; '
                                'then run the migrations again.', grant_sql);
    END IF;
END
$$;
