"""The gRPC front: RocketMQ 5's MessagingService and rmq-spark's StoreService over
``BrokerService`` (protobuf <-> service calls), and the client side of both.
"""
