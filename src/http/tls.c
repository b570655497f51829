/* tls: the HTTPS certificate, reloadable. The contract is in include/http/tls.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/tls.h"

#define CHAIN_MAX 8   /* certificates in a chain: the server's and its intermediates */

/* One certificate chain and its key, as loaded. */
struct creds {
    gnutls_pcert_st pcert[CHAIN_MAX];
    unsigned int n;
    gnutls_privkey_t key;
    struct creds *older;      /* loaded before, kept for the connections that may use it */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct creds *current;

static void creds_free(struct creds *c)
{
    for (unsigned int i = 0; i < c->n; i++)
        gnutls_pcert_deinit(&c->pcert[i]);
    if (c->key)
        gnutls_privkey_deinit(c->key);
    free(c);
}

/* Whether key is the private key of the certificate c: its public key is the certificate's. */
static int key_matches(const struct creds *c)
{
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t a = { NULL, 0 }, b = { NULL, 0 };
    int same = 0;

    if (gnutls_pubkey_init(&pub) == 0 && gnutls_pubkey_import_privkey(pub, c->key, 0, 0) == 0 &&
        gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &a) == 0 &&
        gnutls_pubkey_export2(c->pcert[0].pubkey, GNUTLS_X509_FMT_DER, &b) == 0)
        same = a.size == b.size && memcmp(a.data, b.data, a.size) == 0;
    gnutls_free(a.data);
    gnutls_free(b.data);
    if (pub)
        gnutls_pubkey_deinit(pub);
    return same;
}

/* Reads both files into a new creds. NULL with err set. */
static struct creds *creds_load(const char *cert_file, const char *key_file, char *err,
                                size_t errlen)
{
    struct creds *c = calloc(1, sizeof(*c));
    gnutls_datum_t cert = { NULL, 0 }, key = { NULL, 0 };
    unsigned int max = CHAIN_MAX;
    int rc;

    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if ((rc = gnutls_load_file(cert_file, &cert)) < 0) {
        snprintf(err, errlen, "http.tls_cert_file %s: %s", cert_file, gnutls_strerror(rc));
        goto out;
    }
    if ((rc = gnutls_load_file(key_file, &key)) < 0) {
        snprintf(err, errlen, "http.tls_key_file %s: %s", key_file, gnutls_strerror(rc));
        goto out;
    }
    if ((rc = gnutls_pcert_list_import_x509_raw(c->pcert, &max, &cert, GNUTLS_X509_FMT_PEM,
                                                GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED |
                                                GNUTLS_X509_CRT_LIST_IMPORT_FAIL_IF_EXCEED)) < 0) {
        snprintf(err, errlen, "http.tls_cert_file %s: not a PEM certificate chain of at most %d, "
                 "the server's first: %s", cert_file, CHAIN_MAX, gnutls_strerror(rc));
        goto out;
    }
    c->n = max;
    if ((rc = gnutls_privkey_init(&c->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(c->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        snprintf(err, errlen, "http.tls_key_file %s: not a PEM private key: %s", key_file,
                 gnutls_strerror(rc));
        goto out;
    }
    if (!key_matches(c)) {
        rc = -1;
        snprintf(err, errlen, "http.tls_key_file %s is not the key of the certificate in %s",
                 key_file, cert_file);
    }
out:
    gnutls_free(cert.data);
    gnutls_free(key.data);
    if (rc < 0) {
        creds_free(c);
        return NULL;
    }
    return c;
}

int tls_load(const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    struct creds *c = creds_load(cert_file, key_file, err, errlen);

    if (!c)
        return -1;
    pthread_mutex_lock(&mu);
    c->older = current;
    current = c;
    pthread_mutex_unlock(&mu);
    return 0;
}

int tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                 const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                 gnutls_pcert_st **pcert, unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    int rc = -1;

    (void)session;
    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    pthread_mutex_lock(&mu);
    if (current) {
        *pcert = current->pcert;
        *pcert_length = current->n;
        *pkey = current->key;
        rc = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

void tls_release(void)
{
    pthread_mutex_lock(&mu);
    while (current) {
        struct creds *older = current->older;
        creds_free(current);
        current = older;
    }
    pthread_mutex_unlock(&mu);
}
