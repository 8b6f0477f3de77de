/* mixprec-comm-request.c — MixprecCommRequest: one started collective,
 * waited for exactly once through the plugin however the caller finishes
 * with it (wait, a test that saw it complete, or the last unref). */
#include "config.h"

#include "mixprec.h"
#include "mixprec-comm-private.h"
#include "mixprec-registry-private.h"

/**
 * MixprecCommRequest:
 *
 * A collective started by one of the `mixprec_comm_*_start()` functions.
 * mixprec_comm_request_test() advances it without blocking,
 * mixprec_comm_request_wait() blocks until it completes. Either may be
 * called any number of times; once the request has completed they return
 * its outcome again.
 *
 * The backend makes progress only inside these calls (and inside other
 * collectives of the same communicator): a rank that starts a collective
 * and then computes for a long time without testing it delays its peers.
 *
 * Dropping the last reference to a request that has not completed waits
 * for it, because the backend may still read or write its buffers.
 *
 * Since: 1.0
 */
struct _MixprecCommRequest
{
  GObject parent_instance;

  MixprecComm *comm;
  void *handle;                 /* the plugin's; NULL once waited for */
  gchar *what;                  /* "all_reduce of 12 float32 elements" */
  GError *error;                /* the outcome, once done */
};

G_DEFINE_FINAL_TYPE (MixprecCommRequest, mixprec_comm_request, G_TYPE_OBJECT)

/* Waits for the plugin's request (at once when test() saw it complete)
 * and keeps the outcome. */
static void
finish (MixprecCommRequest *self)
{
  char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
  int status;

  if (self->handle == NULL)
    return;
  status = _mixprec_comm_plugin_wait (self->comm, self->handle, errbuf, sizeof errbuf);
  errbuf[sizeof errbuf - 1] = '\0';
  self->handle = NULL;
  _mixprec_comm_check_status (self->comm, status, errbuf, self->what, &self->error);
}

static void
mixprec_comm_request_finalize (GObject *object)
{
  MixprecCommRequest *self = MIXPREC_COMM_REQUEST (object);

  if (self->handle != NULL)
    {
      finish (self);
      if (self->error != NULL)
        g_debug ("a request nobody waited for failed: %s", self->error->message);
    }
  g_clear_error (&self->error);
  g_free (self->what);
  g_clear_object (&self->comm);

  G_OBJECT_CLASS (mixprec_comm_request_parent_class)->finalize (object);
}

static void
mixprec_comm_request_class_init (MixprecCommRequestClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = mixprec_comm_request_finalize;
}

static void
mixprec_comm_request_init (MixprecCommRequest *self)
{
}

MixprecCommRequest *
_mixprec_comm_request_new (MixprecComm *comm,
                           void        *handle,
                           gchar       *what)
{
  MixprecCommRequest *self = g_object_new (MIXPREC_TYPE_COMM_REQUEST, NULL);

  self->comm = g_object_ref (comm);
  self->handle = handle;
  self->what = what;
  return self;
}

static gboolean
outcome (MixprecCommRequest  *self,
         GError             **error)
{
  if (self->error != NULL)
    {
      g_propagate_error (error, g_error_copy (self->error));
      return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_comm_request_test:
 * @request: a #MixprecCommRequest
 * @error: return location for a #GError
 *
 * Advances the collective without blocking.
 *
 * Returns: %TRUE when it has completed successfully; %FALSE while it is
 *   still running (@error not set) or when it failed (@error set; see
 *   #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_request_test (MixprecCommRequest  *request,
                           GError             **error)
{
  char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
  int done = 0;
  int status;

  g_return_val_if_fail (MIXPREC_IS_COMM_REQUEST (request), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (request->handle == NULL)
    return outcome (request, error);

  status = _mixprec_comm_plugin_test (request->comm, request->handle, &done,
                                      errbuf, sizeof errbuf);
  errbuf[sizeof errbuf - 1] = '\0';
  if (status != MIXPREC_PLUGIN_OK)
    {
      /* The request itself may still be fine; its outcome comes from wait(). */
      g_debug ("%s: test() failed: %s (status %d)", request->what, errbuf, status);
      done = 1;
    }
  if (!done)
    return FALSE;
  finish (request);
  return outcome (request, error);
}

/**
 * mixprec_comm_request_wait:
 * @request: a #MixprecCommRequest
 * @error: return location for a #GError
 *
 * Blocks until the collective completes, at most until a peer has been
 * silent for the communicator's timeout.
 *
 * Returns: %TRUE on success; %FALSE with @error set (see #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_request_wait (MixprecCommRequest  *request,
                           GError             **error)
{
  g_return_val_if_fail (MIXPREC_IS_COMM_REQUEST (request), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  finish (request);
  return outcome (request, error);
}

/**
 * mixprec_comm_request_is_done:
 * @request: a #MixprecCommRequest
 *
 * Whether a test or wait has seen the collective complete. This makes no
 * progress; use mixprec_comm_request_test() to advance it.
 *
 * Returns: %TRUE once the request has completed, successfully or not
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_request_is_done (MixprecCommRequest *request)
{
  g_return_val_if_fail (MIXPREC_IS_COMM_REQUEST (request), FALSE);

  return request->handle == NULL;
}

/**
 * mixprec_comm_request_free: (skip)
 * @request: (transfer full): a #MixprecCommRequest
 *
 * Waits for @request if it has not completed (ignoring its outcome) and
 * drops the caller's reference, like g_object_unref(). Suits
 * g_clear_pointer() and g_ptr_array_new_with_free_func().
 *
 * Since: 1.0
 */
void
mixprec_comm_request_free (MixprecCommRequest *request)
{
  g_return_if_fail (MIXPREC_IS_COMM_REQUEST (request));

  finish (request);
  g_object_unref (request);
}
