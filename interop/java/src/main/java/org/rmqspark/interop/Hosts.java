package org.rmqspark.interop;

import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnknownHostException;

/** "ip:port" / "[v6]:port" text to InetSocketAddress and back (literal addresses only). */
final class Hosts {
    private Hosts() {
    }

    static InetSocketAddress parse(String text) throws UnknownHostException {
        int colon = text.lastIndexOf(':');
        if (colon < 0) {
            throw new IllegalArgumentException("not an ip:port address: " + text);
        }
        String host = text.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port = Integer.parseInt(text.substring(colon + 1));
        // getByName on a literal never touches DNS.
        return new InetSocketAddress(InetAddress.getByName(host), port);
    }

    static String format(SocketAddress address) {
        InetSocketAddress inet = (InetSocketAddress) address;
        String ip = inet.getAddress().getHostAddress();
        if (inet.getAddress() instanceof Inet6Address) {
            return "[" + ip + "]:" + inet.getPort();
        }
        return ip + ":" + inet.getPort();
    }

    static boolean isV6(SocketAddress address) {
        return ((InetSocketAddress) address).getAddress() instanceof Inet6Address;
    }
}
