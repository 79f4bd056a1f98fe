"""The task assignor's parts, one rule per module, in the manner of Kafka Streams'
`streams/processor/internals/assignment/`.

`eddy_contract.assignor` is the entry point (`assign`, `assign_app`, `diff`) and lists the rules;
`plan` puts them in order. Pure data in, data out: no kopf, no Kubernetes client, no Kafka.
"""
