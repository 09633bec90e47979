"""Decision providers: the shared decision loop, its codecs (``vendors/``) and the default."""
