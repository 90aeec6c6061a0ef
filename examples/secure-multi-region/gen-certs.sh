#!/bin/sh
# Generates the certificates of examples/secure-multi-region into certs/: a
# CA, and for each region (eu, us, ap) a certificate and key that its
# nats-server presents on its gateway (to other regions, which check it
# against the CA both ways) and on its client port. Private keys never leave
# certs/, which is not committed.
#
#   sh examples/secure-multi-region/gen-certs.sh            # from the repository root
#   DAYS=30 HOSTS="DNS:nats.eu.example.net" sh gen-certs.sh  # other validity, extra names
#
# Every certificate covers 127.0.0.1 and localhost (the example runs on one
# machine) plus HOSTS, a comma-separated list of subjectAltName entries.
set -eu

dir=$(dirname "$0")/certs
days=${DAYS:-365}
mkdir -p "$dir"
umask 077

if [ ! -f "$dir/ca.pem" ]; then
	openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca-key.pem"
	openssl req -x509 -new -key "$dir/ca-key.pem" -sha256 -days "$days" \
		-subj "/CN=geolimit example NATS CA" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" \
		-out "$dir/ca.pem"
fi

for region in eu us ap; do
	san="IP:127.0.0.1,DNS:localhost"
	if [ -n "${HOSTS:-}" ]; then
		san="$san,$HOSTS"
	fi
	openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$region-key.pem"
	openssl req -new -key "$dir/$region-key.pem" -subj "/CN=nats-$region" -out "$dir/$region.csr"
	printf '%s\n' \
		"basicConstraints=critical,CA:FALSE" \
		"keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=serverAuth,clientAuth" \
		"subjectAltName=$san" > "$dir/$region.ext"
	openssl x509 -req -in "$dir/$region.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
		-CAcreateserial -sha256 -days "$days" -extfile "$dir/$region.ext" -out "$dir/$region-cert.pem"
	rm -f "$dir/$region.csr" "$dir/$region.ext"
done
# The CA certificate is public; the nodes that reach a client port over TLS
# (nats.tls.ca_file) need it.
chmod 644 "$dir/ca.pem"
echo "certificates in $dir"
