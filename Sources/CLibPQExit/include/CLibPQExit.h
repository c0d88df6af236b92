#ifndef POOPYPALS_CLIBPQEXIT_H
#define POOPYPALS_CLIBPQEXIT_H

/* 1 when this process's OpenSSL was told, before any use, not to free its state at exit (see exit.c); 0 when its
   OpenSSL has no OPENSSL_init_crypto (no OpenSSL loaded, or one older than 1.1.1) or refused. */
int clibpqexit_openssl_stays_at_exit(void);

#endif
