#!/bin/sh
# Run once by the postgres image on a new data folder (docker-entrypoint-initdb.d): the app's owner role is
# NOT a superuser (a superuser bypasses row-level security, FORCEd or not), as in scripts/db.sh.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v pw="${POOPYPALS_DB_PASSWORD:-poopypals}" <<'SQL'
CREATE ROLE poopypals LOGIN CREATEDB CREATEROLE PASSWORD :'pw';
CREATE DATABASE poopypals OWNER poopypals;
SQL
