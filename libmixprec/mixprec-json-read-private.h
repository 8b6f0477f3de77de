/* mixprec-json-read-private.h — what every reader of a JSON document in
 * the library shares (the config, its "auto" resolver, checkpoint
 * manifests): paths as messages print them, values shown in messages,
 * and numbers read the way JSON writers write them. Never installed. */
#pragma once

#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* JSON paths as messages print them: a.b, a["odd key"], a[3]. */
void      _mixprec_json_path_append_key   (GString     *path,
                                           const gchar *key);
void      _mixprec_json_path_append_index (GString     *path,
                                           guint        index);
/* @prefix with @key (or [@index]) appended, as a new string. */
gchar    *_mixprec_json_join_path         (const gchar *prefix,
                                           const gchar *key);
gchar    *_mixprec_json_index_path        (const gchar *prefix,
                                           guint        index);

/* @node as a message shows a value: compact JSON cut to 60 characters. */
gchar    *_mixprec_json_show              (JsonNode    *node);
/* @node whole, with numbers that read back to the same values. */
gchar    *_mixprec_json_show_whole        (JsonNode    *node);

/* Whether @node (which may be NULL) is the string "auto", Hugging Face's
 * placeholder. */
gboolean  _mixprec_json_is_auto           (JsonNode    *node);

/* JSON has one number type, so a document may write 5e8 for an integer:
 * an integral double is taken when it is exact (at most 2^53). */
gboolean  _mixprec_json_node_to_integer   (JsonNode    *node,
                                           gint64      *out);
/* A finite number, integer or not. */
gboolean  _mixprec_json_node_to_number    (JsonNode    *node,
                                           gdouble     *out);

G_END_DECLS
