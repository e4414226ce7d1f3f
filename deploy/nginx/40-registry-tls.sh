#!/bin/sh
# Run by the nginx image's entrypoint (mounted into /docker-entrypoint.d) before nginx starts:
# HTTPS when a certificate is mounted at /etc/nginx/certs, plain HTTP otherwise.
# (REGISTRY_NGINX_DIR stands for /etc/nginx; the tests point it at a scratch folder.)
set -eu

nginx_dir="${REGISTRY_NGINX_DIR:-/etc/nginx}"
certs="$nginx_dir/certs"
mkdir -p "$nginx_dir/registry-http.d"
if [ -s "$certs/fullchain.pem" ] && [ -s "$certs/privkey.pem" ]; then
    ln -sf "$nginx_dir/registry/tls.conf" "$nginx_dir/conf.d/registry-tls.conf"
    # Plain HTTP answers with a redirect to the published HTTPS port (308 keeps a POST a POST).
    port="${REGISTRY_HTTPS_PORT:-443}"
    suffix=""
    [ "$port" = "443" ] || suffix=":$port"
    printf 'return 308 https://$host%s$request_uri;\n' "$suffix" >"$nginx_dir/registry-http.d/redirect-to-https.conf"
    echo "$0: HTTPS on (certificate in $certs); plain HTTP redirects to port $port"
else
    rm -f "$nginx_dir/conf.d/registry-tls.conf" "$nginx_dir/registry-http.d/redirect-to-https.conf"
    echo "$0: no certificate in $certs (fullchain.pem and privkey.pem): plain HTTP only"
fi
