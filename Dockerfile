# Control-plane image (web, worker, beat). GPU nodes run the node agent from the same image
# with the NVIDIA container runtime and the engines (SGLang / vLLM) installed beside it.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends numactl nodejs npm redis-tools build-essential \
    && rm -rf /var/lib/apt/lists/*
# llama-cpp-python compiles llama.cpp at install; a portable build runs wherever the image does.
ENV CMAKE_ARGS=-DGGML_NATIVE=OFF
WORKDIR /app
COPY requirements.txt requirements-dev.txt package.json package-lock.json ./
RUN pip install --no-cache-dir -r requirements.txt && npm ci --no-audit --no-fund
COPY . .
ENV DJANGO_SETTINGS_MODULE=controlplane.settings PYTHONUNBUFFERED=1
RUN python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "controlplane.asgi:application"]
