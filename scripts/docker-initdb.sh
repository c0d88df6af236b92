#!/bin/sh
# Run once by the postgres image on a new data folder (docker-entrypoint-initdb.d): the app's owner role is
# NOT a superuser (a superuser bypasses row-level security, FORCEd or not), as in scripts/db.sh.
set -eu
# The password from the environment, never a command line (ps shows those).
POOPYPALS_DB_PASSWORD=${POOPYPALS_DB_PASSWORD:-poopypals} psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<'SQL'
\getenv pw POOPYPALS_DB_PASSWORD
CREATE ROLE poopypals LOGIN CREATEDB CREATEROLE PASSWORD :'pw';
CREATE DATABASE poopypals OWNER poopypals;
SQL
