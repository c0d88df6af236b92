#ifndef POOPYPALS_CLIBPQ_SHIM_H
#define POOPYPALS_CLIBPQ_SHIM_H

#include <libpq-fe.h>
#include <poll.h>

/* The PG_DIAG_* field codes are char macros, which Swift cannot import. */
static const int CLIBPQ_DIAG_SEVERITY_NONLOCALIZED = 'V';
static const int CLIBPQ_DIAG_SEVERITY = 'S';
static const int CLIBPQ_DIAG_SQLSTATE = 'C';
static const int CLIBPQ_DIAG_MESSAGE_PRIMARY = 'M';
static const int CLIBPQ_DIAG_MESSAGE_DETAIL = 'D';
static const int CLIBPQ_DIAG_MESSAGE_HINT = 'H';
static const int CLIBPQ_DIAG_STATEMENT_POSITION = 'P';
static const int CLIBPQ_DIAG_SCHEMA_NAME = 's';
static const int CLIBPQ_DIAG_TABLE_NAME = 't';
static const int CLIBPQ_DIAG_COLUMN_NAME = 'c';
static const int CLIBPQ_DIAG_DATATYPE_NAME = 'd';
static const int CLIBPQ_DIAG_CONSTRAINT_NAME = 'n';

#endif
