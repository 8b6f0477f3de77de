// Where gi-docgen sends links to the namespaces Mixprec's API mentions.
baseURLs = [
  [ 'GLib', 'https://docs.gtk.org/glib/' ],
  [ 'GObject', 'https://docs.gtk.org/gobject/' ],
  [ 'Gio', 'https://docs.gtk.org/gio/' ],
  [ 'Json', 'https://gnome.pages.gitlab.gnome.org/json-glib/' ],
]
