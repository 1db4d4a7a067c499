"""RocketMQ's remoting protocol (REMOTING_PROTOCOL.md): the frame codec and the name-server
client a broker registers with. The broker's remoting server is a later slice (docs/REMOTING.md).
"""
