/* A process must be able to exit while other threads are inside libpq (a pool connecting, a request's query).
 *
 * libpq uses OpenSSL (sslmode=prefer tries TLS on every connect). OpenSSL frees its global state, locks included,
 * in a handler it registers with atexit() when first initialised; a libpq call on another thread after that
 * handler ran and before the process was gone took a freed lock and crashed the process at exit (signal 11 in
 * pthread_rwlock_wrlock: the test process did, after its test run had passed; ProcessExitTests). OpenSSL's own answer
 * is OPENSSL_INIT_NO_ATEXIT (1.1.1 and later): no cleanup at exit, which frees nothing the exit does not free
 * anyway. It must be given before OpenSSL's first initialisation, so it is given here, in a constructor that runs
 * before main (after the libraries the program loads, libcrypto among them, were initialised).
 *
 * OpenSSL is looked up, not linked: libcrypto comes with libpq, and linking it here would make libssl-dev a build
 * dependency for one symbol. Without it (a libpq without OpenSSL) this does nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include "CLibPQExit.h"

#define POOPYPALS_OPENSSL_INIT_NO_ATEXIT 0x00080000L

static int stays_at_exit = 0;

__attribute__((constructor))
static void clibpqexit_keep_openssl_at_exit(void) {
    typedef int (*init_crypto)(uint64_t, const void *);
    init_crypto init = (init_crypto)dlsym(RTLD_DEFAULT, "OPENSSL_init_crypto");
    if (init != NULL && init(POOPYPALS_OPENSSL_INIT_NO_ATEXIT, NULL) == 1) stays_at_exit = 1;
}

int clibpqexit_openssl_stays_at_exit(void) {
    return stays_at_exit;
}
