"""The plugin manager of the fixes of :data:`~sglang_aiter_plugin.fixes.BUILTIN_FIXES`, built on
pluggy: the hook a fix implements (:mod:`.spec`) and the manager that calls each fix behind one
guard (:mod:`.manager`)."""
