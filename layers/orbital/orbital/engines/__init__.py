"""Work that spans more than one request (deferred calls, skill probes, file transfers): state machines over the
table, driven by method handlers and workflow steps. Engines reach the families' hooks through `Services.hooks`."""
