FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY registry ./registry
COPY migrations ./migrations
COPY seed_data ./seed_data
COPY admin_ui ./admin_ui
RUN pip install --no-cache-dir -c constraints.txt . && useradd --system --home /data registry && mkdir -p /data && chown registry /data
USER registry
WORKDIR /data
ENV REGISTRY_DATA_DIR=/data REGISTRY_HOST=0.0.0.0 PYTHONUNBUFFERED=1
EXPOSE 8080
# Alive (the process answers); docker-compose.yml checks readiness (/readyz) for its replicas.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"
CMD ["mcp-registry", "serve", "--host", "0.0.0.0", "--port", "8080"]
