/* fuzz-handshake.c — the job-secret handshake with a fixed test secret:
 * the input is what an untrusted party sends, as frames (a 20-byte
 * header and its payload each). Played against rank 0's side (a
 * challenge, then a proof) and against a rank's side (rank 0's reply),
 * no input may crash either or be accepted without a MAC that verifies
 * under the secret; a reflected MAC (rank 0's own) must never pass. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"
#include "fuzz-common.h"

static GBytes *secret;

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  fuzz_init ();
  secret = g_bytes_new_static ("fuzz-handshake test secret 0123", 31);
  return 0;
}

/* Takes the next frame off @data; FALSE when none is left whole. */
static gboolean
next_frame (const uint8_t    **data,
            size_t            *size,
            MixprecWireHeader *h,
            const guint8     **payload)
{
  g_autoptr(GError) error = NULL;

  if (*size < MIXPREC_WIRE_HEADER_SIZE)
    return FALSE;
  if (_mixprec_wire_parse_header (*data, MIXPREC_WIRE_MAX_HELLO, "fuzz", h, &error)
      != MIXPREC_WIRE_OK)
    return FALSE;
  if (*size - MIXPREC_WIRE_HEADER_SIZE < h->length)
    return FALSE;
  *payload = *data + MIXPREC_WIRE_HEADER_SIZE;
  *data += MIXPREC_WIRE_HEADER_SIZE + h->length;
  *size -= MIXPREC_WIRE_HEADER_SIZE + h->length;
  return TRUE;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  MixprecWireHeader h;
  const guint8 *payload;
  guint8 peer_nonce[MIXPREC_AUTH_NONCE_SIZE], root_nonce[MIXPREC_AUTH_NONCE_SIZE];
  guint8 root_mac[MIXPREC_AUTH_MAC_SIZE];
  const uint8_t *p = data;
  size_t left = size;

  /* rank 0's side: a fresh random nonce, as in the rendezvous */
  if (next_frame (&p, &left, &h, &payload))
    {
      g_autoptr(GError) error = NULL;

      if (_mixprec_auth_parse_challenge (&h, payload, peer_nonce, &error))
        {
          g_assert (_mixprec_auth_random (root_nonce, sizeof root_nonce, NULL));
          _mixprec_auth_mac (secret, MIXPREC_AUTH_ROLE_ROOT, peer_nonce, root_nonce, root_mac);
          while (next_frame (&p, &left, &h, &payload))
            {
              g_autoptr(GError) proof_error = NULL;

              /* the input cannot know root_nonce: nothing it sends may pass */
              g_assert (!_mixprec_auth_check_proof (secret, peer_nonce, root_nonce, &h, payload,
                                                    &proof_error));
              g_assert (proof_error != NULL);
            }
          /* rank 0's own MAC sent back as a proof fails too */
          h.type = MIXPREC_WIRE_AUTH_PROOF;
          h.length = MIXPREC_AUTH_MAC_SIZE;
          g_assert (!_mixprec_auth_check_proof (secret, peer_nonce, root_nonce, &h, root_mac,
                                                NULL));
        }
      else
        g_assert (error != NULL);
    }

  /* a rank's side: its nonce is random, every frame is a candidate reply */
  g_assert (_mixprec_auth_random (peer_nonce, sizeof peer_nonce, NULL));
  p = data;
  left = size;
  while (next_frame (&p, &left, &h, &payload))
    {
      g_autoptr(GError) error = NULL;

      g_assert (!_mixprec_auth_check_reply (secret, peer_nonce, &h, payload, root_nonce,
                                            &error));
      g_assert (error != NULL);
    }
  return 0;
}
