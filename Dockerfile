# syntax=docker/dockerfile:1
#
# The edge daemon as a static binary on a distroless base, running as a
# non-root user.
#
#   docker build -t geolimit/edge .
#   openssl rand -hex 32 > tokens
#   docker run --rm -p 8080:8080 -v "$PWD/tokens:/run/secrets/geolimit-api-tokens:ro" geolimit/edge
#   docker run --rm -p 127.0.0.1:8080:8080 geolimit/edge -config /etc/geolimit/demo-insecure.yaml
#   docker run --rm -p 8080:8080 -v "$PWD/edge.yaml:/etc/geolimit/edge.yaml:ro" geolimit/edge
#
# The image runs deploy/container/edge.yaml: the demo rules with the API on
# 0.0.0.0:8080 behind a bearer token mounted at
# /run/secrets/geolimit-api-tokens. demo-insecure.yaml runs it without a
# token, for a demo on one's own machine. A config of your own replaces
# /etc/geolimit/edge.yaml.

ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static, reproducible: no cgo, no local paths; -buildvcs stamps the commit
# into `edge -version` when the build context holds .git.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags="-s -w" -o /out/edge ./cmd/edge \
 && /out/edge -version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edge /usr/local/bin/edge
COPY deploy/container/edge.yaml deploy/container/demo-insecure.yaml /etc/geolimit/
USER nonroot:nonroot
# API, proxy, embedded NATS client and gateway, memberlist (TCP and UDP).
EXPOSE 8080 8000 4222 7222 7946 7946/udp
ENTRYPOINT ["/usr/local/bin/edge"]
CMD ["-config", "/etc/geolimit/edge.yaml"]
