"""batchscope's web shell and command line. May import engine; engine never imports app."""
