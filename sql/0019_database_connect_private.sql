-- Issue 42, item 1: one database's owner must not reach another PoopyPals database on the same server. The
-- service roles (poopypals_app, poopypals_profiles) are cluster-wide and every migrating login is a member, so
-- with PostgreSQL's default CONNECT for PUBLIC the owner of database B could connect to database A, SET ROLE
-- poopypals_profiles, and read every profile there. Without CONNECT it cannot open a session in A at all.
--
-- CONNECT is taken from PUBLIC and given to the login that migrates (the service's login, README "Deployment");
-- a service that logs in as another role needs GRANT CONNECT ON DATABASE ... TO it. Only the database's owner
-- (or a member of it) may change its privileges: anyone else gets a notice here, and `poopypals monitor rls`
-- keeps failing ("PUBLIC may connect") until the owner does it. CREATE DATABASE ... TEMPLATE does not copy a
-- database's privileges: a copy of a migrated database must be given the same REVOKE.
DO $$
DECLARE
    owner_oid constant oid := (SELECT datdba FROM pg_database WHERE datname = current_database());
BEGIN
    IF NOT pg_has_role(current_user, owner_oid, 'MEMBER') THEN
        RAISE NOTICE 'CONNECT stays with PUBLIC: % does not own database %; as its owner run REVOKE CONNECT ON DATABASE % FROM PUBLIC',
            current_user, current_database(), quote_ident(current_database());
        RETURN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), current_user);
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', current_database());
END
$$;
