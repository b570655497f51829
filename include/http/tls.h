/* tls: the HTTPS certificate and key of the HTTP server (GnuTLS, which libmicrohttpd speaks TLS
 * with), loaded from PEM files and loaded again on request (SIGHUP), so that a certificate
 * rotates without a restart: each TLS handshake asks tls_retrieve for the current one. The
 * process has one; a certificate replaced stays in memory until tls_release, as connections
 * begun with it may still refer to it (a few kilobytes per reload). Thread-safe. */
#ifndef DQ_TLS_H
#define DQ_TLS_H

#include <stddef.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

/* Loads the certificate chain in cert_file and the private key in key_file (PEM) and makes
 * them the current ones. 0, or -1 with err set (the current ones stay). */
int tls_load(const char *cert_file, const char *key_file, char *err, size_t errlen);

/* GnuTLS's certificate callback (gnutls_certificate_retrieve_function2), for libmicrohttpd's
 * MHD_OPTION_HTTPS_CERT_CALLBACK: hands the current certificate and key over. */
int tls_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                 const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                 gnutls_pcert_st **pcert, unsigned int *pcert_length, gnutls_privkey_t *pkey);

/* Frees every certificate and key loaded; no handshake may run any more. */
void tls_release(void);

#endif
