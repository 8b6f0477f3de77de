/* mixprec-bootstrap-wire-private.h — the bootstrap's framing on TCP: one
 * fixed header and a bounded payload per message, every wait with a
 * deadline and an abort switch. */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define MIXPREC_WIRE_MAGIC 0x4d585042u        /* "MXPB" */
/* 2: the job-secret handshake (AUTH_*) comes first on every connection
 * of a job that has a secret */
#define MIXPREC_WIRE_VERSION 2
#define MIXPREC_WIRE_HEADER_SIZE 20
/* Control messages only: rank 0's reply is world_size * len bytes. */
#define MIXPREC_WIRE_MAX_PAYLOAD (64u << 20)
#define MIXPREC_WIRE_MAX_HELLO 4096u
/* A hello's fixed part: rank, world size, local rank, local world size,
 * pid (big-endian u32 each), then up to 255 bytes of host name. */
#define MIXPREC_WIRE_HELLO_SIZE 20
#define MIXPREC_WIRE_MAX_HOST 255
/* A FAIL message is shown to the user: longer ones are cut. */
#define MIXPREC_WIRE_MAX_FAIL 4096u

typedef enum {
  MIXPREC_WIRE_HELLO = 1,      /* rank -> 0: who I am */
  MIXPREC_WIRE_WELCOME = 2,    /* 0 -> rank: every rank joined */
  MIXPREC_WIRE_FAIL = 3,       /* 0 -> rank: aux = error code, payload = message */
  MIXPREC_WIRE_GATHER = 4,     /* rank -> 0: aux = kind, payload = contribution */
  MIXPREC_WIRE_RESULT = 5,     /* 0 -> rank: the concatenation in rank order */
  MIXPREC_WIRE_AUTH_CHALLENGE = 6, /* rank -> 0: the rank's nonce */
  MIXPREC_WIRE_AUTH_REPLY = 7, /* 0 -> rank: rank 0's nonce and its MAC */
  MIXPREC_WIRE_AUTH_PROOF = 8, /* rank -> 0: the rank's MAC */
} MixprecWireType;

/* Where a connection to rank 0 stands (rank 0's view). */
typedef enum {
  MIXPREC_WIRE_AWAIT_CHALLENGE, /* job secret: nothing proven yet */
  MIXPREC_WIRE_AWAIT_PROOF,    /* challenge answered, the peer's MAC due */
  MIXPREC_WIRE_AWAIT_HELLO,    /* proven (or no secret): its hello due */
  MIXPREC_WIRE_ADMITTED,       /* a rank of the job */
} MixprecWireState;

typedef enum {
  MIXPREC_WIRE_OK,
  MIXPREC_WIRE_AGAIN,          /* nothing more to read now */
  MIXPREC_WIRE_CLOSED,         /* the peer closed or reset the connection */
  MIXPREC_WIRE_TIMEOUT,        /* the deadline passed */
  MIXPREC_WIRE_CANCELLED,      /* the bootstrap was aborted */
  MIXPREC_WIRE_BAD,            /* not our protocol; error says how */
  MIXPREC_WIRE_FAILED,         /* any other socket error; error says what */
} MixprecWireStatus;

typedef struct {
  guint32 magic;
  guint16 version;
  guint16 type;
  guint32 aux;
  guint32 seq;
  guint32 length;
} MixprecWireHeader;

/* One connection and the frame being read from it. */
typedef struct {
  GSocket *socket;
  gchar *peer;                 /* "127.0.0.1:54321", for messages */
  guint rank;                  /* G_MAXUINT until its hello is accepted */
  guint32 pid;                 /* from the hello, for messages */
  gchar *host;
  guint8 head[MIXPREC_WIRE_HEADER_SIZE];
  gsize head_got;
  MixprecWireHeader header;
  guint8 *payload;
  gsize payload_got;
  gboolean ready;              /* header and payload complete */
  MixprecWireState state;
  gint64 deadline;             /* rank 0: when an unproven peer is dropped */
  guint8 peer_nonce[32];
  guint8 root_nonce[32];
} MixprecWireConn;

/* A hello's contents, checked. */
typedef struct {
  guint rank;
  guint world_size;
  guint local_rank;
  guint local_world_size;
  guint32 pid;
  gchar host[MIXPREC_WIRE_MAX_HOST + 1];
} MixprecWireHello;

MixprecWireConn  *_mixprec_wire_conn_new     (GSocket            *socket);
void              _mixprec_wire_conn_free    (MixprecWireConn    *conn);
void              _mixprec_wire_conn_reset   (MixprecWireConn    *conn);
MixprecWireStatus _mixprec_wire_conn_read    (MixprecWireConn    *conn,
                                              gsize               max_payload,
                                              GError            **error);
MixprecWireStatus _mixprec_wire_conn_receive (MixprecWireConn    *conn,
                                              gsize               max_payload,
                                              gint64              deadline,
                                              GCancellable       *cancellable,
                                              GError            **error);
MixprecWireStatus _mixprec_wire_send         (GSocket            *socket,
                                              MixprecWireType     type,
                                              guint32             aux,
                                              guint32             seq,
                                              gconstpointer       payload,
                                              gsize               len,
                                              gint64              deadline,
                                              GCancellable       *cancellable,
                                              GError            **error);
gchar            *_mixprec_wire_peer_name    (GSocket            *socket);
MixprecWireStatus _mixprec_wire_parse_header (const guint8       *head,
                                              gsize               max_payload,
                                              const gchar        *peer,
                                              MixprecWireHeader  *header,
                                              GError            **error);
gboolean          _mixprec_wire_parse_hello  (const guint8       *payload,
                                              gsize               len,
                                              MixprecWireHello   *hello,
                                              GError            **error);
gboolean          _mixprec_wire_check_hosts  (const guint8       *ids,
                                              gsize               len,
                                              guint               world_size,
                                              GError            **error);
gchar            *_mixprec_wire_printable    (const guint8       *bytes,
                                              gsize               len);
guint32           _mixprec_wire_get_u32      (const guint8       *p);
void              _mixprec_wire_put_u32      (guint8             *p,
                                              guint32             v);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (MixprecWireConn, _mixprec_wire_conn_free)

G_END_DECLS
