"""The user's pipeline API and its compiler: what a ``build(topology)`` describes, compiled into
sub-topologies, stores and topics. Runs wherever a pipeline is loaded; imports no process package."""
